/* Shared chart helpers. Every string that comes from an agent (item ids, reasons,
   labels) goes through esc() before Plotly sees it: Plotly renders a subset of HTML
   in labels, and agent text is data, never markup. */
(function () {
  "use strict";
  var ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  function esc(s) {
    return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g, function (c) { return ESC[c]; });
  }
  function data(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  var config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  function hasData(traces) {
    return traces.some(function (t) {
      var xs = t.x || [], ys = t.y || [];
      var n = Math.max(xs.length, ys.length);
      for (var i = 0; i < n; i++) {
        if ((t.type === "bar" ? ys[i] || xs[i] : ys[i] !== null && ys[i] !== undefined)) { return true; }
      }
      return false;
    });
  }
  /* An empty range is a sentence, not a blank chart with -1..6 axes. */
  function empty(el, text) {
    el.classList.add("is-empty");
    el.style.height = "";
    el.textContent = "";
    var p = document.createElement("p");
    p.className = "chart-empty";
    p.textContent = text || el.getAttribute("data-empty") || "No data in this range.";
    el.appendChild(p);
  }
  function plot(id, traces, layout) {
    var el = document.getElementById(id);
    if (!el) { return null; }
    if (!hasData(traces)) { empty(el); return null; }
    var base = {
      margin: { l: 60, r: 20, t: 36, b: 40 },
      font: { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12, color: "#1d2330" },
      paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      hoverlabel: { align: "left" },
      legend: { orientation: "h", y: -0.2 }
    };
    var merged = Object.assign(base, layout || {});
    // A fixed container height: a responsive plot re-laid out on resize never spills
    // over what follows it.
    if (merged.height) { el.style.height = merged.height + "px"; }
    Plotly.newPlot(el, traces, merged, config);
    return el;
  }
  /* Clicks on points and bars are followed by clickthrough.js, from their customdata. */
  function pct(v) { return v === null || v === undefined ? "–" : (v * 100).toFixed(0) + "%"; }
  var KIND = {
    system: "#3b6fd8", tools: "#6f8fe0", task: "#1f4fb0", constraint: "#163c88", memory: "#8e6bd1",
    history: "#e0a100", summary: "#c98a00", tool_result: "#2e9d6a", retrieval: "#5cb88a", example: "#9aa3b2",
    state: "#1b7f5a", user: "#d2603a", other: "#b0b7c3"
  };
  var CAUSE = {
    hit: "#2e7d32", prefix_changed: "#c62828", ttl_expired: "#e0a100", cold_start: "#6f8fe0",
    below_minimum: "#9aa3b2",
    /* Missing evidence (did not reach the model): reds and purples. */
    never_candidate: "#8e6bd1", left_candidates: "#5b3a9e", budget: "#c62828", truncated: "#ad1457",
    compaction: "#d2603a",
    /* Risks (reached the model, may not help): ambers, the colour of .badge.warn. */
    not_used: "#e0a100", middle_zone: "#f0c75e", truncated_present: "#b26a00"
  };
  function color(map, key, i) {
    var fallback = ["#3b6fd8", "#e0a100", "#2e9d6a", "#c62828", "#8e6bd1", "#d2603a", "#5b6475"];
    return map[key] || fallback[i % fallback.length];
  }
  /* Regression markers, shared by the overview and the cache view: a dotted line where the
     new prefix arrived, a dashed one where the rolling rate crossed the threshold, labelled
     with the same stored figures as the regression card. */
  function regressionMarkers(regs, shapes, annotations) {
    regs.forEach(function (r) {
      if (r.first_at && r.first_at !== r.at) {
        shapes.push({ type: "line", x0: r.first_at, x1: r.first_at, yref: "paper", y0: 0, y1: 1,
                      line: { color: "#c62828", width: 1, dash: "dot" } });
      }
      shapes.push({ type: "line", x0: r.at, x1: r.at, yref: "paper", y0: 0, y1: 1, line: { color: "#c62828", width: 2, dash: "dash" } });
      annotations.push({ x: r.at, y: 1, yref: "paper", yanchor: "bottom", showarrow: false, font: { color: "#c62828", size: 11 },
        text: "regression " + pct(r.baseline) + " → " + pct(r.current) + " (" + r.window + "-call windows)" +
              (r.segment ? ", " + esc(r.segment) + " changed" : "") });
    });
  }
  window.ctxview = { esc: esc, data: data, plot: plot, empty: empty, pct: pct, KIND: KIND, CAUSE: CAUSE,
                     color: color, regressionMarkers: regressionMarkers };
})();
