/* Runs list: one dot per run (time of its last call, hit rate), one colour per agent. */
(function () {
  "use strict";
  var cv = window.ctxview, esc = cv.esc, runs = cv.data("runs-data");
  var agents = [];
  runs.forEach(function (r) { if (agents.indexOf(r.agent) < 0) { agents.push(r.agent); } });
  var traces = agents.map(function (agent, i) {
    var rs = runs.filter(function (r) { return r.agent === agent; });
    return {
      type: "scatter", mode: "markers", name: esc(agent), x: rs.map(function (r) { return r.at; }),
      y: rs.map(function (r) { return r.hit === null ? 0 : r.hit; }), customdata: rs.map(function (r) { return r.url; }),
      text: rs.map(function (r) {
        return esc(r.run) + "<br>" + r.calls + " calls" + (r.missing ? ", " + r.missing + " evidence missing" : "") +
               (r.failed ? ", " + r.failed + " failed compaction(s)" : "");
      }),
      marker: { size: rs.map(function (r) { return 8 + Math.min(12, r.calls); }), color: cv.color({}, "", i), opacity: 0.85,
                line: { width: rs.map(function (r) { return r.missing || r.failed ? 3 : 0; }), color: "#c62828" } },
      hovertemplate: "%{text}<br>hit rate %{y:.0%}<extra></extra>"
    };
  });
  cv.plot("chart-runs", traces, {
    height: 240, yaxis: { tickformat: ".0%", range: [-0.08, 1.08], title: { text: "hit rate" } },
    margin: { l: 60, r: 20, t: 10, b: 40 }, legend: { orientation: "h", y: -0.25 }
  });
})();
