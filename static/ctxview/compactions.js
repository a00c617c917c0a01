/* Compaction review: ratio r against distortion d, one point per compaction; click to open its call. */
(function () {
  "use strict";
  var cv = window.ctxview, esc = cv.esc, d = cv.data("compactions-data");
  var groups = [[false, "all invariants held", "#2e7d32"], [true, "an invariant failed", "#c62828"]];
  var traces = groups.map(function (g) {
    var pts = d.points.filter(function (p) { return p.failed === g[0]; });
    return { type: "scatter", mode: "markers", name: g[1], x: pts.map(function (p) { return p.r; }),
             y: pts.map(function (p) { return p.d; }), customdata: pts.map(function (p) { return p.url; }),
             text: pts.map(function (p) { return esc(p.label); }), marker: { size: 11, color: g[2] },
             hovertemplate: "%{text}<br>r %{x:.2f}, d %{y:.2f}<extra></extra>" };
  });
  cv.plot("chart-compactions", traces, {
    height: 280, xaxis: { title: { text: "ratio r (after / before)" }, range: [0, 1.05] },
    yaxis: { title: { text: "distortion d" }, range: [-0.05, 1.05] }, margin: { l: 60, r: 20, t: 10, b: 50 }
  });
})();
