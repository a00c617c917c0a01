/* Cache view: hit rate per agent/model over time, per-call points coloured by cause,
   and misses by cause per bucket. */
(function () {
  "use strict";
  var cv = window.ctxview, esc = cv.esc, d = cv.data("cache-data");
  function minute(ms) { return new Date(ms).toISOString().slice(0, 16) + "Z"; }
  function bucketUrl(base, start) {  /* the calls of exactly that bucket, as the server's bucket_urls */
    var t = new Date(start).getTime();
    return base + "since=" + minute(t) + "&until=" + minute(t + d.bucket_seconds * 1000);
  }
  var traces = Object.keys(d.lines).map(function (name, i) {
    var l = d.lines[name];
    var urls = l.x.map(function (x) { return bucketUrl(l.calls_url, x); });
    return { type: "scatter", mode: "lines+markers", name: esc(name), x: l.x, y: l.y, customdata: urls,
             line: { width: 2, color: cv.color({}, "", i) }, marker: { size: 5 },
             hovertemplate: esc(name) + "<br>%{x}: %{y:.0%}<br>click: the calls of this bucket<extra></extra>" };
  });
  var byCause = {};
  d.points.forEach(function (p) { (byCause[p.cause] = byCause[p.cause] || []).push(p); });
  Object.keys(byCause).forEach(function (cause, i) {
    var pts = byCause[cause];
    traces.push({
      type: "scatter", mode: "markers", name: "call: " + esc(cause), x: pts.map(function (p) { return p.started_at; }),
      y: pts.map(function (p) { return p.hit_ratio; }), customdata: pts.map(function (p) { return p.url; }), marker: { size: 6, color: cv.color(cv.CAUSE, cause, i), opacity: 0.8 },
      text: pts.map(function (p) {
        return esc(p.call__call_id) + " (" + esc(p.agent) + ")<br>" + esc(cause) + (p.changed_segment ? ": " + esc(p.changed_segment) + " changed" : "");
      }),
      hovertemplate: "%{text}<br>hit %{y:.0%}<extra></extra>"
    });
  });
  var shapes = [], annotations = [];
  cv.regressionMarkers(d.regressions, shapes, annotations);
  cv.plot("chart-cache", traces, { height: 360, yaxis: { tickformat: ".0%", range: [-0.03, 1.05], title: { text: "hit rate" } },
                                   shapes: shapes, annotations: annotations,
                                   margin: { l: 60, r: 20, t: 36, b: 40 }, legend: { orientation: "h", y: -0.15 } });
})();
