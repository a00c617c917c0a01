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
  var text = t.z.map(function (row, r) {
    return row.map(function (v, i) {
      return t.stages[r] + ": " + (v === null ? "unknown" : v ? "yes" : "no") + (t.causes[i] ? "<br>cause " + esc(t.causes[i]) : "");
    });
  });
  var custom = t.z.map(function (row) { return row.map(function (_, i) { return t.urls[i]; }); });
  cv.plot("chart-timeline", [{
    type: "heatmap", x: t.steps.map(function (s) { return "step " + s; }), y: t.stages, z: t.z, text: text, customdata: custom,
    zmin: 0, zmax: 1, colorscale: [[0, "#f3c6c6"], [1, "#bfe3c6"]], showscale: false, xgap: 3, ygap: 3,
    hovertemplate: "%{x}<br>%{text}<extra></extra>"
  }], { height: 240, margin: { l: 90, r: 10, t: 10, b: 30 }, yaxis: { autorange: "reversed" } });
})();
