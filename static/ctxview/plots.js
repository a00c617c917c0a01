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
    below_minimum: "#9aa3b2", never_candidate: "#8e6bd1", budget: "#c62828", truncated: "#e0a100",
    compaction: "#d2603a", not_used: "#6f8fe0", middle_zone: "#b0b7c3"
  };
  function color(map, key, i) {
    var fallback = ["#3b6fd8", "#e0a100", "#2e9d6a", "#c62828", "#8e6bd1", "#d2603a", "#5b6475"];
    return map[key] || fallback[i % fallback.length];
  }
  window.ctxview = { esc: esc, data: data, plot: plot, empty: empty, pct: pct, KIND: KIND, CAUSE: CAUSE,
                     color: color };
})();
