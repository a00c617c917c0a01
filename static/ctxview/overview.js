/* Project overview charts: hit-rate trend with prefix-change and regression markers,
   tokens by kind, cached vs uncached, missing-evidence causes. */
(function () {
  "use strict";
  var cv = window.ctxview, esc = cv.esc, d = cv.data("overview-data");
  var shapes = [], annotations = [];
  cv.regressionMarkers(d.regressions, shapes, annotations);
  var changedX = [], changedY = [], changedText = [], changedUrls = [];
  d.x.forEach(function (x, i) {
    if (d.prefix_changes[i] > 0) {
      changedX.push(x); changedY.push(d.hit_rate[i]); changedText.push(d.prefix_changes[i] + " prefix change(s)");
      changedUrls.push(d.prefix_urls[i]);
    }
  });
  cv.plot("chart-hit", [
    { type: "scatter", mode: "lines+markers", name: "hit rate", x: d.x, y: d.hit_rate, line: { color: "#2956d6", width: 2 },
      customdata: d.urls, hovertemplate: "%{x}<br>hit rate %{y:.0%}<br>click: the calls of this bucket<extra></extra>" },
    { type: "scatter", mode: "markers", name: "prefix hash changed", x: changedX, y: changedY, text: changedText,
      customdata: changedUrls, marker: { symbol: "diamond", size: 10, color: "#c62828" },
      hovertemplate: "%{x}<br>%{text}<br>click: the calls whose prefix changed<extra></extra>" },
    { type: "scatter", mode: "markers", name: "regression", x: d.regressions.map(function (r) { return r.at; }),
      y: d.regressions.map(function (r) { return r.current; }), customdata: d.regression_urls,
      marker: { symbol: "x", size: 11, color: "#c62828" },
      hovertemplate: "%{x}<br>regression: hit rate %{y:.0%}<br>click: the call where it crossed the threshold<extra></extra>" }
  ], { height: 300, yaxis: { tickformat: ".0%", range: [0, 1.05], title: { text: "cache read / input" } },
       shapes: shapes, annotations: annotations, margin: { l: 60, r: 20, t: 36, b: 50 } });

  var kinds = Object.keys(d.by_kind);
  cv.plot("chart-kind", kinds.map(function (k, i) {
    return { type: "bar", name: esc(k), x: d.x, y: d.by_kind[k], customdata: d.urls, marker: { color: cv.color(cv.KIND, k, i) } };
  }), { barmode: "stack", height: 300, yaxis: { title: { text: "tokens in context" } }, margin: { l: 70, r: 10, t: 10, b: 40 } });

  var cached = [["cache read", "#2e7d32"], ["cache write", "#e0a100"], ["uncached", "#9aa3b2"]];
  cv.plot("chart-cached", cached.map(function (c) {
    return { type: "bar", name: c[0], x: d.x, y: d.cached[c[0]], customdata: d.urls, marker: { color: c[1] } };
  }), { barmode: "stack", height: 300, yaxis: { title: { text: "input tokens" } }, margin: { l: 70, r: 10, t: 10, b: 40 } });

  var causes = Object.keys(d.causes);
  var traces = causes.map(function (c, i) {
    return { type: "bar", name: esc(c), x: d.x, y: d.causes[c], marker: { color: cv.color(cv.CAUSE, c, i) },
             customdata: d.urls.map(function (u) { return u + (u.indexOf("?") < 0 ? "?" : "&") + "cause=" + encodeURIComponent(c); }) };
  });
  cv.plot("chart-causes", traces, { barmode: "stack", height: 260, yaxis: { title: { text: "evidence missing" } },
                                     margin: { l: 60, r: 10, t: 10, b: 40 } });

  var risks = Object.keys(d.risks);
  var riskTraces = risks.map(function (c, i) {
    return { type: "bar", name: esc(c), x: d.x, y: d.risks[c], marker: { color: cv.color(cv.CAUSE, c, i) } };
  });
  if (!riskTraces.length) { riskTraces = [{ type: "bar", name: "none", x: d.x, y: d.x.map(function () { return 0; }) }]; }
  cv.plot("chart-risks", riskTraces, { barmode: "stack", height: 220, yaxis: { title: { text: "risk flags" } },
                                       margin: { l: 60, r: 10, t: 10, b: 40 } });
})();
