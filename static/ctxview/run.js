/* Run view: context per step stacked by kind against window / cap / effective limit,
   hit rate per step with its cause, compaction, context-edit and re-read markers. */
(function () {
  "use strict";
  var cv = window.ctxview, esc = cv.esc, d = cv.data("run-data");
  var x = d.steps;
  // One label per step up to 30 steps; beyond, Plotly picks about 20 (a 1,000-step run stays readable).
  var stepAxis = x.length <= 30 ? { dtick: 1 } : { nticks: 20 };
  var traces = Object.keys(d.kinds).map(function (k, i) {
    return { type: "bar", name: esc(k), x: x, y: d.kinds[k], customdata: d.urls,
             marker: { color: cv.color(cv.KIND, k, i) }, hovertemplate: "step %{x}<br>" + esc(k) + ": %{y} tokens<extra></extra>" };
  });
  function line(name, y, color, dash) {
    return { type: "scatter", mode: "lines", name: name, x: x, y: y, line: { color: color, width: 2, dash: dash, shape: "hvh" },
             hovertemplate: name + " %{y}<extra></extra>" };
  }
  traces.push(line("window", d.window, cv.theme().ink, "solid"));
  traces.push(line("input cap", d.input_cap, "#5b6475", "dash"));
  if (d.effective_limit.some(function (v) { return v; })) { traces.push(line("effective limit", d.effective_limit, "#8e6bd1", "dot")); }
  var top = Math.max.apply(null, d.window.concat([1]));
  if (d.compactions.length) {
    traces.push({ type: "scatter", mode: "markers", name: "compaction", x: d.compactions.map(function (c) { return c.step; }),
                  y: d.compactions.map(function () { return top * 1.04; }), text: d.compactions.map(function (c) { return esc(c.text); }),
                  customdata: d.compactions.map(function (c) { return c.url; }),
                  marker: { symbol: "diamond", size: 12, color: "#d2603a" }, hovertemplate: "step %{x}<br>%{text}<extra></extra>" });
  }
  if (d.edits.length) {
    traces.push({ type: "scatter", mode: "markers", name: "context edit", x: d.edits.map(function (c) { return c.step; }),
                  y: d.edits.map(function () { return top * 1.08; }), text: d.edits.map(function (c) { return esc(c.text); }),
                  customdata: d.edits.map(function (c) { return c.url; }),
                  marker: { symbol: "triangle-down", size: 11, color: "#5b6475" }, hovertemplate: "step %{x}<br>%{text}<extra></extra>" });
  }
  if (d.rereads.length) {
    traces.push({ type: "scatter", mode: "markers", name: "re-read", x: d.rereads.map(function (c) { return c.step; }),
                  y: d.rereads.map(function () { return top * 1.12; }), text: d.rereads.map(function (c) { return esc(c.text); }),
                  customdata: d.rereads.map(function (c) { return c.url; }),
                  marker: { symbol: "circle-open", size: 11, color: "#b7791f", line: { width: 2 } },
                  hovertemplate: "step %{x}<br>%{text}<extra></extra>" });
  }
  cv.plot("chart-steps", traces, {
    barmode: "stack", height: 340, xaxis: Object.assign({ title: { text: "step" } }, stepAxis), yaxis: { title: { text: "tokens" } },
    margin: { l: 60, r: 20, t: 20, b: 40 }
  });
  /* The window by category per step (ctxkit.breakdown): the segments in their order, in the
     colours of the call view's bar (the stylesheet's --win-<segment>). */
  var w = d.breakdown, style = getComputedStyle(document.documentElement);
  var windowAxis = w.steps.length <= 30 ? { dtick: 1 } : { nticks: 20 };
  var windowTraces = w.order.filter(function (s) {
    return w.segments[s].some(function (v) { return v; });
  }).map(function (s) {
    var label = esc(w.labels[s]);
    return { type: "bar", name: label, x: w.steps, y: w.segments[s], customdata: w.urls,
             marker: { color: style.getPropertyValue("--win-" + s).trim() || "#8a93a3",
                       line: { color: cv.theme().line, width: s === "free" ? 1 : 0 } },
             hovertemplate: "step %{x}<br>" + label + ": %{y} tokens<extra></extra>" };
  });
  cv.plot("chart-window", windowTraces, {
    barmode: "stack", height: 340, xaxis: Object.assign({ title: { text: "step" } }, windowAxis),
    yaxis: { title: { text: "tokens" } }, margin: { l: 60, r: 20, t: 20, b: 40 },
    legend: { orientation: "h", y: -0.2, traceorder: "normal" }  // the call view's order, not the stack's
  });
  var text = d.cause.map(function (c, i) {
    return c ? esc(c) + (d.segment[i] ? " (" + esc(d.segment[i]) + " changed)" : "") + (d.detail[i] ? "<br>" + esc(d.detail[i]) : "") : "no cache event";
  });
  var colors = d.cause.map(function (c, i) { return cv.color(cv.CAUSE, c || "", i); });
  cv.plot("chart-hits", [{
    type: "scatter", mode: "lines+markers", x: x, y: d.hit_rate, customdata: d.urls, text: text,
    line: { color: "#9aa3b2", width: 1 }, marker: { color: colors, size: x.length > 200 ? 5 : 12, line: { color: "#fff", width: x.length > 200 ? 0 : 1 } },
    hovertemplate: "step %{x}: %{y:.0%}<br>%{text}<extra></extra>", name: "hit rate"
  }], { height: 220, yaxis: { tickformat: ".0%", range: [-0.05, 1.05] }, xaxis: Object.assign({ title: { text: "step" } }, stepAxis),
        margin: { l: 60, r: 20, t: 10, b: 40 }, showlegend: false });
})();
