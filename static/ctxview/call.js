/* The call view: allocation bar, per-item bars, and the what-if replay. */
(function () {
  "use strict";
  var cv = window.ctxview, esc = cv.esc;
  var alloc = cv.data("allocation-data");
  var ZONE = { head: "#3b6fd8", middle: "#e0a100", tail: "#2e9d6a" };
  var ZONE_ALT = { head: "#7d9ee6", middle: "#f0c14d", tail: "#6cc39b" };
  var CUT = { keep: false, compress: true, extract: true, summarize: true, truncate: true, ref: true, hard_cut: true };

  function windowBar() {
    var inside = alloc.items.filter(function (r) { return r.in_context && r.used > 0; });
    var x = [], base = [], colors = [], text = [], hover = [], at = 0, zones = {};
    inside.forEach(function (r, i) {
      x.push(r.used); base.push(at);
      colors.push((i % 2 ? ZONE_ALT : ZONE)[r.zone] || "#9aa3b2");
      text.push(r.used / alloc.window > 0.07 ? esc(r.id) + " " + r.used : r.used / alloc.window > 0.035 ? esc(r.id) : "");
      hover.push("<b>" + esc(r.id) + "</b> (" + esc(r.kind) + ", " + esc(r.zone) + ")<br>" + r.used + " tokens, " +
                 esc(r.action) + (r.trust === "untrusted" ? "<br>⚠ untrusted" : ""));
      var z = zones[r.zone] || (zones[r.zone] = { from: at, to: at, tokens: 0 });
      z.to = at + r.used; z.tokens += r.used;
      at += r.used;
    });
    var rest = [];
    if (alloc.headroom > 0) { rest.push(["headroom", alloc.headroom, "#edf0f5", "unused input space under the cap"]); }
    if (alloc.margin > 0) { rest.push(["margin", alloc.margin, "#d5dae3", "safety margin"]); }
    if (alloc.reserve > 0) { rest.push(["output reserve", alloc.reserve, "#9aa3b2", "kept free for the answer"]); }
    var pos = Math.max(at, alloc.input_cap);
    if (alloc.headroom > 0) { pos = at; }
    rest.forEach(function (r) {
      x.push(r[1]); base.push(pos); colors.push(r[2]);
      text.push(r[1] / alloc.window > 0.06 ? r[0] + " " + r[1] : "");
      hover.push("<b>" + r[0] + "</b><br>" + r[1] + " tokens: " + r[3]);
      pos += r[1];
    });
    var shapes = [], annotations = [];
    ["head", "middle", "tail"].forEach(function (name) {
      var z = zones[name];
      if (!z) { return; }
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: z.from, x1: z.to, y0: 0.93, y1: 0.93,
                    line: { color: ZONE[name], width: 4 } });
      annotations.push({ x: (z.from + z.to) / 2, y: 1.0, xref: "x", yref: "paper", showarrow: false,
                         text: "<b>" + name.toUpperCase() + "</b> " + z.tokens, font: { color: ZONE[name], size: 12 },
                         yanchor: "bottom" });
    });
    function vline(at, label, color) {
      shapes.push({ type: "line", x0: at, x1: at, y0: 0, y1: 0.9, yref: "paper", line: { color: color, width: 2, dash: "dot" } });
      annotations.push({ x: at, y: 0.03, yref: "paper", yanchor: "bottom", xanchor: "left", text: label, showarrow: false,
                         font: { size: 11, color: color }, bgcolor: "rgba(255,255,255,0.85)", borderpad: 1 });
    }
    vline(alloc.input_cap, "input cap " + alloc.input_cap, "#1d2330");
    if (alloc.effective_limit && alloc.effective_limit < alloc.window) {
      vline(alloc.effective_limit, "effective limit " + alloc.effective_limit, "#8e6bd1");
    }
    cv.plot("allocation-window", [{
      type: "bar", orientation: "h", y: x.map(function () { return "window"; }), x: x, base: base,
      marker: { color: colors, line: { color: "#fff", width: 1 } }, text: text, textposition: "inside",
      insidetextanchor: "middle", textangle: 0, textfont: { color: "#fff", size: 11 },
      hovertext: hover, hoverinfo: "text", showlegend: false, width: 0.8
    }], {
      height: 150, barmode: "overlay", margin: { l: 10, r: 20, t: 26, b: 30 },
      xaxis: { range: [0, alloc.window], title: { text: "tokens (window " + alloc.window + ")", standoff: 4 }, fixedrange: true },
      yaxis: { visible: false, fixedrange: true }, shapes: shapes, annotations: annotations,
      uniformtext: { mode: "hide", minsize: 9 }
    });
  }

  function itemBars() {
    var rows = alloc.items.slice();
    var limit = 60, note = "";
    if (rows.length > limit) {
      var keep = rows.slice().sort(function (a, b) { return b.requested - a.requested; }).slice(0, limit);
      rows = rows.filter(function (r) { return keep.indexOf(r) >= 0; });
      note = " (the " + limit + " largest of " + alloc.items.length + "; all are in the table)";
    }
    var y = [rows.map(function (r) { return r.zone; }),
             rows.map(function (r) { return esc(r.id) + (r.trust === "untrusted" ? " ⚠" : "") + (r.pinned ? " (pinned)" : ""); })];
    var hover = rows.map(function (r) {
      return "<b>" + esc(r.id) + "</b> · " + esc(r.kind) + " · " + esc(r.action) + "<br>requested " + r.requested +
             ", granted " + r.granted + ", used " + r.used + "<br>" + esc(r.reason).slice(0, 160);
    });
    var usedColor = rows.map(function (r) {
      if (!r.in_context || r.used === 0) { return "#c62828"; }
      return CUT[r.action] || r.used < r.requested ? "#e0a100" : "#3b6fd8";
    });
    var common = { type: "bar", orientation: "h", y: y, hovertext: hover, hoverinfo: "text" };
    cv.plot("allocation-items", [
      Object.assign({ name: "requested", x: rows.map(function (r) { return r.requested; }), width: 0.8,
                      marker: { color: "rgba(154,163,178,0.35)", line: { color: "#9aa3b2", width: 1 } } }, common),
      Object.assign({ name: "granted", x: rows.map(function (r) { return r.granted; }), width: 0.55,
                      marker: { color: "#c8d3ea" } }, common),
      Object.assign({ name: "used", x: rows.map(function (r) { return r.used; }), width: 0.3,
                      marker: { color: usedColor },
                      text: rows.map(function (r) { return r.in_context ? "" : esc(r.action); }),
                      textposition: "outside", textfont: { color: "#c62828", size: 10 } }, common)
    ], {
      title: { text: "Per item: requested, granted, used" + note, font: { size: 13 }, x: 0.01 },
      barmode: "overlay", height: Math.min(1600, 90 + 22 * rows.length), showlegend: false,
      margin: { l: 230, r: 40, t: 34, b: 36 },
      xaxis: { title: { text: "tokens", standoff: 4 }, rangemode: "tozero" },
      yaxis: { autorange: "reversed", type: "multicategory", automargin: true }
    });
  }

  windowBar();
  itemBars();

  /* What-if replay ------------------------------------------------------- */
  var cfg = cv.data("whatif-config");
  var budget = document.getElementById("whatif-budget");
  var reserve = document.getElementById("whatif-reserve");
  var status = document.getElementById("whatif-status");
  var timer = null, seq = 0;

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) { td.className = cls; }
    tr.appendChild(td);
    return td;
  }
  function badge(td, text, cls) {
    td.textContent = "";
    var span = document.createElement("span");
    span.className = cls; span.textContent = text; td.appendChild(span);
  }
  function render(d) {
    var s = d.summary;
    var summary = document.getElementById("whatif-summary");
    summary.textContent = "";
    [["budget", d.params.budget], ["reserve", d.params.reserve], ["input cap", d.cap], ["in context", d.used],
     ["headroom", d.headroom], ["items kept whole", s.whole], ["cut", s.cut], ["dropped", s.dropped],
     ["evidence present", s.evidence_present + "/" + s.evidence_total]].forEach(function (p) {
      var span = document.createElement("span");
      span.appendChild(document.createTextNode(p[0] + " "));
      var b = document.createElement("b"); b.textContent = p[1]; span.appendChild(b);
      summary.appendChild(span);
    });
    var tbody = document.querySelector("#whatif-items tbody");
    tbody.textContent = "";
    d.items.forEach(function (r) {
      var tr = document.createElement("tr");
      tr.dataset.item = r.id;
      if (r.changed) { tr.className = "changed"; }
      var idCell = cell(tr, r.id);
      var policy = document.createElement("div");
      policy.className = "hint";
      policy.textContent = r.policy_recorded ? r.policy : r.policy + " (assumed)";
      idCell.appendChild(policy);
      badge(cell(tr, ""), r.actual.action, "action action-" + r.actual.action);
      cell(tr, String(r.actual.used), "num");
      var td = cell(tr, ""); badge(td, r.replay.action, "action action-" + r.replay.action); td.title = r.replay.reason;
      cell(tr, String(r.replay.used), "num");
      tbody.appendChild(tr);
    });
    var ebody = document.querySelector("#whatif-evidence tbody");
    ebody.textContent = "";
    d.evidence.forEach(function (e) {
      var tr = document.createElement("tr");
      tr.dataset.evidence = e.key;
      cell(tr, e.label || e.key);
      badge(cell(tr, ""), e.actual ? "present" : "missing", e.actual ? "badge ok" : "badge bad");
      badge(cell(tr, ""), e.replay, e.replay === "present" ? "badge ok" : e.replay === "missing" ? "badge bad" : "badge warn");
      cell(tr, e.why, "hint");
      ebody.appendChild(tr);
    });
    var ids = d.items.map(function (r) { return esc(r.id); });
    cv.plot("whatif-chart", [
      { type: "bar", name: "actual used", x: ids, y: d.items.map(function (r) { return r.actual.used; }), marker: { color: "#9aa3b2" } },
      { type: "bar", name: "replay used (budget " + d.params.budget + ")", x: ids,
        y: d.items.map(function (r) { return r.replay.used; }), marker: { color: "#3b6fd8" } }
    ], { barmode: "group", height: 240, margin: { l: 50, r: 10, t: 10, b: 60 }, legend: { orientation: "h", y: 1.15 },
         yaxis: { title: { text: "tokens" } } });
    var label = document.getElementById("whatif-fidelity-label");
    label.textContent = "";
    var tag = document.createElement("span");
    tag.className = d.fidelity.exact ? "badge ok" : "badge warn";
    tag.textContent = d.fidelity.exact ? "Exact replay" : "Approximation";
    label.appendChild(tag);
    label.appendChild(document.createTextNode(d.fidelity.exact
      ? " ctxkit recorded each item's policy and floor and the allocator's settings: at the call's own budget this replay gives every item the agent's action and tokens."
      : " Why: "));
    d.fidelity.why.forEach(function (w, n) {
      label.appendChild(document.createTextNode((d.fidelity.exact ? " Note: " : (n ? "; " : "")) + w + "."));
    });
    label.dataset.exact = d.fidelity.exact ? "yes" : "no";
    var fidelity = document.getElementById("whatif-fidelity");
    fidelity.textContent = "At the call's own budget the replay takes the same action as the agent for " +
      s.baseline_same_action + " of " + s.items + " items; highlighted rows differ from that baseline." +
      (d.skipped.length ? " Not re-allocated: " + d.skipped.map(function (k) { return k.id; }).join(", ") + "." : "");
    status.textContent = d.warnings.length ? d.warnings.join("; ") : "";
  }
  function clampReserve() {
    var max = Math.max(0, parseInt(budget.value, 10) - cfg.margin);
    reserve.max = String(max);
    if (parseInt(reserve.value, 10) > max) { reserve.value = String(max); }
  }
  function run() {
    clampReserve();
    document.getElementById("whatif-budget-out").textContent = budget.value;
    document.getElementById("whatif-reserve-out").textContent = reserve.value;
    var mine = ++seq;
    status.textContent = "computing…";
    var url = cfg.url + "?call=" + encodeURIComponent(cfg.call_id) + "&budget=" + encodeURIComponent(budget.value) +
              "&reserve=" + encodeURIComponent(reserve.value) + "&margin=" + encodeURIComponent(cfg.margin);
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); })
      .then(function (res) {
        if (mine !== seq) { return; }
        if (!res.ok) { status.textContent = "error: " + (res.body.error || "unknown"); return; }
        render(res.body);
        document.getElementById("whatif").dataset.budget = String(res.body.params.budget);
        history.replaceState(null, "", "#whatif=" + budget.value + "," + reserve.value);
      })
      .catch(function (err) { if (mine === seq) { status.textContent = "error: " + err; } });
  }
  function schedule() { clearTimeout(timer); timer = setTimeout(run, 150); }
  budget.addEventListener("input", schedule);
  reserve.addEventListener("input", schedule);
  document.getElementById("whatif-reset").addEventListener("click", function () {
    budget.value = String(cfg.budget); reserve.value = String(cfg.reserve); run();
  });
  var m = /#whatif=(\d+),(\d+)/.exec(window.location.hash);
  if (m) { budget.value = m[1]; reserve.value = m[2]; }
  run();
})();
