/* Evidence triage: causes breakdown and one evidence's timeline across a run. */
(function () {
  "use strict";
  var cv = window.ctxview, esc = cv.esc, d = cv.data("evidence-data");
  var causes = d.causes;
  cv.plot("chart-causes", [{
    type: "bar", orientation: "h", y: causes.map(function (c) { return esc(c.label); }),
    x: causes.map(function (c) { return c.n; }), customdata: causes.map(function (c) { return c.url; }), marker: { color: causes.map(function (c, i) { return cv.color(cv.CAUSE, c.cause, i); }) },
    hovertemplate: "%{y}: %{x}<extra></extra>"
  }], { height: Math.max(180, 60 + 34 * causes.length), margin: { l: 230, r: 20, t: 10, b: 40 },
        yaxis: { autorange: "reversed", automargin: true }, xaxis: { title: { text: "evidence" }, rangemode: "tozero" } });

  var t = cv.data("timeline-data");
  if (!t) { return; }
  // A cell is coloured by whether its answer is good for the evidence, not by yes/no:
  // "truncated? no" is good, "present? no" is bad. The cell also says yes or no, so the
  // colour is never the only signal.
  var goodWhenYes = { candidate: true, granted: true, truncated: false, summarized: false, present: true, used: true };
  var good = t.z.map(function (row, r) {
    return row.map(function (v) { return v === null ? null : (goodWhenYes[t.stages[r]] === false ? 1 - v : v); });
  });
  var label = t.z.map(function (row) { return row.map(function (v) { return v === null ? "?" : v ? "yes" : "no"; }); });
  var custom = t.z.map(function (row, r) {
    return row.map(function (v, i) {
      return [t.urls[i], t.stages[r] + ": " + label[r][i] + (t.causes[i] ? "<br>cause " + esc(t.causes[i]) : "")];
    });
  });
  cv.plot("chart-timeline", [{
    type: "heatmap", x: t.steps.map(function (s) { return "step " + s; }), y: t.stages, z: good, text: label, customdata: custom,
    zmin: 0, zmax: 1, colorscale: [[0, "#f3c6c6"], [1, "#bfe3c6"]], showscale: false, xgap: 3, ygap: 3,
    texttemplate: "%{text}", textfont: { color: "#1d2330", size: 11 },
    hovertemplate: "%{x}<br>%{customdata[1]}<extra></extra>"
  }], { height: 240, margin: { l: 90, r: 10, t: 10, b: 30 }, yaxis: { autorange: "reversed" } });
})();
