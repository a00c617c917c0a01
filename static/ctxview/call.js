/* The call view: allocation bar, per-item bars, and the what-if replay. */
(function () {
  "use strict";
  var cv = window.ctxview, esc = cv.esc;
  var alloc = cv.data("allocation-data");
  // One colour per action group (selectors/calls.py ACTION_GROUPS), with a label colour
  // that reads on it (4.5:1 or better); the legend below the bar is built from this map.
  var GROUP = {
    whole: { color: "#2f5fc4", text: "#ffffff" },
    cut: { color: "#e0a100", text: "#1d2330" },
    summarized: { color: "#6f47bd", text: "#ffffff" },
    dropped: { color: "#b3261e", text: "#ffffff" }
  };
  var IN = "in context", OUT = "not sent";

  function fmtN(n) { return Number(n).toLocaleString("en-US"); }
  function textWidth(s, size) { return s.length * (size || 11) * 0.62 + 6; }

  /* Place labels on one or more rows so that none overlaps another or leaves the plot:
     each wants a centre (px); it goes on the first row where it fits. */
  function placeLabels(labels, plotW) {
    var ends = [];
    labels.forEach(function (l) {
      var left = Math.min(Math.max(0, l.centre - l.width / 2), Math.max(0, plotW - l.width));
      var row = 0;
      while (ends[row] !== undefined && ends[row] + 8 > left) { row++; }
      ends[row] = left + l.width;
      l.left = left; l.row = row;
    });
    return ends.length;
  }

  function spaceColors() {
    var t = cv.theme();
    return {
      headroom: { color: getComputedStyle(document.documentElement).getPropertyValue("--neutral-bg").trim() || "#eceff4",
                  text: t.fg, what: "how many more input tokens could have gone in (input cap − input read)" },
      other: { color: "#5b6475", text: "#ffffff", what: "input the model read that no item accounts for (the provider's count less the items')" },
      margin: { color: "#c3c9d4", text: "#1d2330", what: "safety margin" },
      reserve: { color: "#8d96a6", text: "#1d2330", what: "kept free for the answer" }
    };
  }

  function legend() {
    var box = document.getElementById("allocation-legend");
    if (!box) { return; }
    box.textContent = "";
    var spaces = spaceColors();
    var entries = Object.keys(GROUP).map(function (g) { return [alloc.groups[g], GROUP[g].color]; })
      .concat([["not sent (hatched)", "#8d96a6", true], ["other input", spaces.other.color], ["headroom", spaces.headroom.color],
               ["safety margin", spaces.margin.color], ["output reserve", spaces.reserve.color]]);
    entries.forEach(function (e) {
      var span = document.createElement("span");
      span.textContent = e[0];
      span.style.setProperty("--c", e[1]);
      if (e[2]) { span.className = "hatched"; }
      box.appendChild(span);
    });
  }

  function windowBar() {
    var el = document.getElementById("allocation-window");
    var inside = alloc.items.filter(function (r) { return r.in_context && r.used > 0; });
    var outside = alloc.items.filter(function (r) { return !r.in_context; });
    var outTotal = outside.reduce(function (a, r) { return a + Math.max(1, r.requested); }, 0);
    var xmax = Math.max(alloc.window, outTotal, 1);
    var margin = { l: 78, r: 16 };
    var plotW = Math.max(120, (el.clientWidth || 800) - margin.l - margin.r);
    function px(tokens) { return tokens / xmax * plotW; }
    function label(full, short, tokens) {
      if (textWidth(full) < px(tokens)) { return full; }
      if (short && textWidth(short) < px(tokens)) { return short; }
      return "";
    }

    var seg = { x: [], base: [], y: [], color: [], text: [], textColor: [], hover: [], pattern: [] };
    var table = { head: ["segment", "row", "from token", "tokens", "what"], rows: [] };
    function push(y, from, tokens, color, text, textColor, hover, hatched) {
      var parts = cv.plain(hover).split("; ");
      table.rows.push([parts[0], y, String(from), String(tokens), parts.slice(1).join("; ")]);
      seg.y.push(y); seg.base.push(from); seg.x.push(tokens); seg.color.push(color);
      seg.text.push(text); seg.textColor.push(textColor); seg.hover.push(hover); seg.pattern.push(hatched ? "/" : "");
    }
    var at = 0, zones = {};
    // An item by what the agent calls it (a tool's name, a message's role and turn), its path beside.
    function named(r) { return r.label ? esc(r.label) : esc(r.id); }
    function titled(r) { return r.label ? "<b>" + esc(r.label) + "</b> " + esc(r.id) : "<b>" + esc(r.id) + "</b>"; }
    inside.forEach(function (r) {
      var g = GROUP[r.group] || GROUP.whole;
      var tokens = r.used < r.requested ? r.used + " of " + r.requested : String(r.used);
      push(IN, at, r.used, g.color, label(named(r) + " " + r.used, named(r), r.used), g.text,
           titled(r) + " (" + esc(r.kind) + ", " + esc(r.zone) + " zone)<br>" + tokens + " tokens · " +
           esc(r.action) + " · " + esc(alloc.groups[r.group]) + (r.trust === "untrusted" ? "<br>⚠ untrusted" : ""));
      var z = zones[r.zone] || (zones[r.zone] = { from: at, to: at, tokens: 0 });
      z.to = at + r.used; z.tokens += r.used;
      at += r.used;
    });
    var spaces = spaceColors();
    // Input the model read beyond the items (the question, message framing): from the
    // provider's count, so that items + this + headroom end at the input cap.
    if (alloc.unitemized > 0) {
      push(IN, at, alloc.unitemized, spaces.other.color, label("other input " + alloc.unitemized, "other", alloc.unitemized),
           spaces.other.text, "<b>other input</b><br>" + alloc.unitemized + " tokens: " + spaces.other.what, false);
      at += alloc.unitemized;
    }
    var pos = alloc.headroom > 0 ? at : Math.max(at, alloc.input_cap);
    // Headroom is the figure input cap − input read; it is drawn up to the cap (when the
    // provider counted fewer tokens than the items, the items already reach past the read).
    [["headroom", alloc.headroom, spaces.headroom, Math.min(alloc.headroom, alloc.input_cap - at)],
     ["margin", alloc.margin, spaces.margin], ["output reserve", alloc.reserve, spaces.reserve]].forEach(function (r) {
      var width = r.length > 3 ? r[3] : r[1];
      if (r[1] <= 0 || width <= 0) { return; }
      push(IN, pos, width, r[2].color, label(r[0] + " " + r[1], r[0], width), r[2].text,
           "<b>" + r[0] + "</b><br>" + r[1] + " tokens: " + r[2].what, false);
      pos += width;
    });
    var off = 0;
    outside.forEach(function (r) {
      var tokens = Math.max(1, r.requested);
      var g = GROUP[r.group] || GROUP.dropped;
      push(OUT, off, tokens, g.color, label(named(r) + " " + r.requested, named(r), tokens), g.text,
           titled(r) + " (" + esc(r.kind) + "), not sent<br>asked for " + r.requested + " tokens · " +
           esc(r.action) + " · " + esc(alloc.groups[r.group]) + "<br>" + esc(r.reason).slice(0, 160), true);
      off += tokens;
    });

    // Zones as brackets above the bar, their labels placed so none overlaps or is clipped.
    var t = cv.theme(), shapes = [], annotations = [], inset = xmax * 0.003;
    var zoneLabels = ["head", "middle", "tail"].filter(function (n) { return zones[n]; }).map(function (n) {
      var z = zones[n], full = n.toUpperCase() + " " + fmtN(z.tokens);
      var text = textWidth(full, 12) <= px(z.to - z.from) ? full : n.toUpperCase();
      return { zone: n, z: z, text: text, width: textWidth(text, 12), centre: px((z.from + z.to) / 2) };
    });
    var zoneRows = placeLabels(zoneLabels, plotW);
    var rows = outside.length ? [IN, OUT] : [IN];
    var barsPx = rows.length * 44;
    var caps = [["input cap " + fmtN(alloc.input_cap), alloc.input_cap, "dot"]];
    if (alloc.effective_limit && alloc.effective_limit < alloc.window) {
      caps.push(["effective limit " + fmtN(alloc.effective_limit), alloc.effective_limit, "dash"]);
    }
    var capLabels = caps.map(function (c) { return { text: c[0], width: textWidth(c[0]), centre: px(c[1]), at: c[1], dash: c[2] }; });
    var capRows = placeLabels(capLabels, plotW);
    var bandPx = capRows * 16 + 6;
    var top = 14 + zoneRows * 18, bottom = 34;
    var height = top + barsPx + bandPx + bottom;
    var barTop = 1, barBottom = bandPx / (barsPx + bandPx);
    zoneLabels.forEach(function (l) {
      var x0 = l.z.from + inset, x1 = l.z.to - inset;
      [[x0, x1, 1.0 + 10 / (barsPx + bandPx), 1.0 + 10 / (barsPx + bandPx)], [x0, x0, 1.0 + 2 / (barsPx + bandPx), 1.0 + 10 / (barsPx + bandPx)],
       [x1, x1, 1.0 + 2 / (barsPx + bandPx), 1.0 + 10 / (barsPx + bandPx)]].forEach(function (s) {
        shapes.push({ type: "line", xref: "x", yref: "paper", x0: s[0], x1: s[1], y0: s[2], y1: s[3], line: { color: t.fg, width: 1.5 } });
      });
      annotations.push({ x: l.left / plotW * xmax, xanchor: "left", y: barTop, yref: "paper", yanchor: "bottom",
                         yshift: 12 + l.row * 18, showarrow: false, text: "<b>" + l.text + "</b>", font: { color: t.fg, size: 12 } });
    });
    // The cap lines run in the gaps around the bars, never across a segment's label.
    var n = rows.length, half = 0.35;
    function paperY(y) { return barBottom + (1 - barBottom) * (1 - (y + 0.5) / n); }
    var gaps = [[paperY(-half), 1]];
    for (var k = 0; k < n; k++) { gaps.push([k + 1 < n ? paperY(k + 1 - half) : barBottom, paperY(k + half)]); }
    capLabels.forEach(function (c) {
      gaps.forEach(function (g) {
        shapes.push({ type: "line", xref: "x", yref: "paper", x0: c.at, x1: c.at, y0: Math.min(g[0], g[1]), y1: Math.max(g[0], g[1]),
                      line: { color: t.fg, width: 2, dash: c.dash } });
      });
      annotations.push({ x: c.left / plotW * xmax, xanchor: "left", y: barBottom, yref: "paper", yanchor: "top",
                         yshift: -2 - c.row * 16, showarrow: false, text: c.text, font: { color: t.fg, size: 11 } });
    });

    cv.plot("allocation-window", [{
      type: "bar", orientation: "h", y: seg.y, x: seg.x, base: seg.base,
      marker: { color: seg.color, line: { color: t.surface, width: 1 },
                pattern: { shape: seg.pattern, fillmode: "overlay", fgcolor: "rgba(255,255,255,0.35)", size: 8, solidity: 0.12 } },
      text: seg.text, textposition: "inside", insidetextanchor: "middle", textangle: 0,
      textfont: { color: seg.textColor, size: 11 }, constraintext: "none", cliponaxis: true,
      hovertext: seg.hover, hoverinfo: "text", showlegend: false, width: 0.7, name: "tokens"
    }], {
      height: height, barmode: "overlay", margin: { l: margin.l, r: margin.r, t: top, b: bottom },
      xaxis: { range: [0, xmax], fixedrange: true, anchor: "free", position: 0,
               title: { text: "tokens (window " + fmtN(alloc.window) + ")", standoff: 2 } },
      yaxis: { type: "category", categoryorder: "array", categoryarray: rows, autorange: "reversed",
               domain: [barBottom, 1], fixedrange: true, ticks: "" },
      shapes: shapes, annotations: annotations, uniformtext: { mode: "hide", minsize: 10 }
    }, { table: table });
    legend();
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
             rows.map(function (r) { return (r.label ? esc(r.label) + " · " : "") + esc(r.id) + (r.trust === "untrusted" ? " ⚠" : "") + (r.pinned ? " (pinned)" : ""); })];
    var hover = rows.map(function (r) {
      return (r.label ? "<b>" + esc(r.label) + "</b> " + esc(r.id) : "<b>" + esc(r.id) + "</b>") + " · " + esc(r.kind) + " · " + esc(r.action) + " (" + esc(alloc.groups[r.group]) + ")<br>requested " +
             r.requested + ", granted " + r.granted + ", used " + r.used + "<br>" + esc(r.reason).slice(0, 160);
    });
    var usedColor = rows.map(function (r) { return (GROUP[r.group] || GROUP.whole).color; });
    var t = cv.theme();
    var common = { type: "bar", orientation: "h", y: y, hovertext: hover, hoverinfo: "text" };
    cv.plot("allocation-items", [
      Object.assign({ name: "requested", x: rows.map(function (r) { return r.requested; }), width: 0.8,
                      marker: { color: "rgba(141,150,166,0.30)", line: { color: "#8d96a6", width: 1 } } }, common),
      Object.assign({ name: "granted", x: rows.map(function (r) { return r.granted; }), width: 0.55,
                      marker: { color: "rgba(47,95,196,0.25)" } }, common),
      Object.assign({ name: "used", x: rows.map(function (r) { return r.used; }), width: 0.3,
                      marker: { color: usedColor },
                      text: rows.map(function (r) { return r.in_context ? "" : esc(r.action); }),
                      textposition: "outside", textfont: { color: t.fg, size: 10 } }, common)
    ], {
      title: { text: "Per item: requested (outline), granted (shaded), used (coloured by action)" + note, font: { size: 13 }, x: 0.01 },
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
  // The number boxes hold the values sent; each slider beside its box moves in steps.
  var budget = document.getElementById("whatif-budget-num");
  var reserve = document.getElementById("whatif-reserve-num");
  var budgetSlider = document.getElementById("whatif-budget");
  var reserveSlider = document.getElementById("whatif-reserve");
  var status = document.getElementById("whatif-status");
  var timer = null, seq = 0, touched = false;

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
      var idCell = cell(tr, r.label || r.id);
      if (r.label) {  // what the agent calls it, then its path
        var path = document.createElement("div");
        path.className = "hint";
        path.textContent = r.id;
        idCell.appendChild(path);
      }
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
    var b = Math.min(Math.max(parseInt(budget.value, 10) || cfg.budget, cfg.min_budget), cfg.max_budget);
    budget.value = String(b);
    var max = Math.max(0, b - cfg.margin);
    reserve.max = reserveSlider.max = String(max);
    var r = Math.min(Math.max(parseInt(reserve.value, 10) || 0, 0), max);
    reserve.value = String(r);
    budgetSlider.value = budget.value; reserveSlider.value = reserve.value;
  }
  function run() {
    clampReserve();
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
        // The URL keeps the replay's settings, unless it was opened at a section (#rereads) and
        // the settings were not touched since: that anchor stays.
        if (touched || !/^#./.test(window.location.hash) || /^#whatif=/.test(window.location.hash)) {
          history.replaceState(null, "", "#whatif=" + budget.value + "," + reserve.value);
        }
      })
      .catch(function (err) { if (mine === seq) { status.textContent = "error: " + err; } });
  }
  function schedule() { touched = true; clearTimeout(timer); timer = setTimeout(run, 150); }
  budgetSlider.addEventListener("input", function () { budget.value = budgetSlider.value; schedule(); });
  reserveSlider.addEventListener("input", function () { reserve.value = reserveSlider.value; schedule(); });
  // A typed number is sent when the box is left or Enter pressed, not at every keystroke.
  budget.addEventListener("change", schedule);
  reserve.addEventListener("change", schedule);
  document.getElementById("whatif-reset").addEventListener("click", function () {
    budget.value = String(cfg.budget); reserve.value = String(cfg.reserve); touched = true; run();
  });
  var m = /#whatif=(\d+),(\d+)/.exec(window.location.hash);
  if (m) { budget.value = m[1]; reserve.value = m[2]; }
  run();
})();
