/* Shared chart helpers. Every string that comes from an agent (item ids, reasons,
   labels) goes through esc() before Plotly sees it: Plotly renders a subset of HTML
   in labels, and agent text is data, never markup.

   Every chart gets a text alternative: the chart is a labelled figure, and a
   <details> after it holds the chart's data as a table (built from the traces on first
   opening, so a 1,000-step chart costs nothing until asked for). Colours of text, grid
   and background come from the page's CSS variables, so charts follow dark mode. */
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
  function css(name, fallback) {
    var v = getComputedStyle(document.documentElement).getPropertyValue(name);
    return (v && v.trim()) || fallback;
  }
  /* The theme's colours for what is not data: text, lines, the background. */
  function theme() {
    return { fg: css("--fg", "#1d2330"), muted: css("--muted", "#5b6475"), line: css("--line", "#e3e6ec"),
             surface: css("--surface", "#fff"), ink: css("--fg", "#1d2330") };
  }
  function themed(layout) {
    var t = theme();
    var out = {
      font: { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12, color: t.fg },
      paper_bgcolor: t.surface, plot_bgcolor: t.surface,
      hoverlabel: { align: "left" }
    };
    ["xaxis", "yaxis", "yaxis2"].forEach(function (axis) {
      if (axis === "yaxis2" && !layout.yaxis2) { return; }
      out[axis] = Object.assign({ gridcolor: t.line, zerolinecolor: t.line, linecolor: t.line }, layout[axis] || {});
    });
    return out;
  }
  var config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  var plotted = [];
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


  /* Text of a Plotly label: its markup (<b>, <br>) dropped, its escaped agent text
     decoded back to text. A <template> parses without running or loading anything. */
  function plain(s) {
    if (s === null || s === undefined) { return ""; }
    var t = document.createElement("template");
    t.innerHTML = String(s).replace(/<br\s*\/?>/gi, "; ");
    return t.content.textContent;
  }
  function titleOf(el, layout) {
    var own = el.getAttribute("aria-label") || (layout.title && (layout.title.text || layout.title));
    if (own) { return plain(own); }
    for (var n = el; n && n !== document.body; n = n.parentElement) {
      for (var p = n.previousElementSibling; p; p = p.previousElementSibling) {
        if (/^H[1-4]$/.test(p.tagName)) { return p.textContent.trim(); }
      }
    }
    return "chart";
  }
  function fmt(v) {
    if (v === null || v === undefined || v === "") { return "–"; }
    if (typeof v === "number") { return Number.isInteger(v) ? String(v) : String(Math.round(v * 1000) / 1000); }
    return plain(v);
  }
  /* Rows: one per category (x, or y for horizontal bars); columns: one per trace; a
     heatmap gives one row per y and one column per x. */
  function tableOf(traces) {
    var heat = traces.filter(function (t) { return t.type === "heatmap"; })[0];
    if (heat) {
      return {
        head: [""].concat(heat.x.map(fmt)),
        rows: heat.y.map(function (y, r) {
          return [fmt(y)].concat(heat.z[r].map(function (v, c) {
            var label = heat.text && heat.text[r] ? heat.text[r][c] : v;
            return fmt(label === undefined ? v : label);
          }));
        })
      };
    }
    var keys = [], index = {}, cols = [], details = {};
    traces.forEach(function (t, ti) {
      var horizontal = t.orientation === "h";
      var cats = (horizontal ? t.y : t.x) || [], vals = (horizontal ? t.x : t.y) || [];
      if (cats.length === 2 && Array.isArray(cats[0]) && Array.isArray(cats[1]) && cats[0].length === vals.length) {
        cats = cats[1].map(function (c, i) { return cats[0][i] + " / " + c; });  // multicategory
      }
      cols.push(plain(t.name) || (traces.length === 1 ? "value" : "series " + (ti + 1)));
      cats.forEach(function (c, i) {
        var k = String(c);
        if (!(k in index)) { index[k] = keys.length; keys.push(k); }
        var row = index[k];
        (details[row] = details[row] || {})[ti] = vals[i];
        var extra = Array.isArray(t.hovertext) ? t.hovertext[i] : Array.isArray(t.text) ? t.text[i] : null;
        if (extra && !details[row].note) { details[row].note = plain(extra); }
      });
    });
    var withNotes = keys.some(function (_, r) { return details[r].note; });
    return {
      head: [""].concat(cols, withNotes ? ["details"] : []),
      rows: keys.map(function (k, r) {
        return [plain(k)].concat(cols.map(function (_, ti) { return fmt(details[r][ti]); }),
                                 withNotes ? [details[r].note || ""] : []);
      })
    };
  }
  function dataTable(el, traces, title, given) {
    var id = el.id + "-data";
    var old = document.getElementById(id);
    if (old) { old.remove(); }
    var box = document.createElement("details");
    box.className = "chart-data"; box.id = id;
    var summary = document.createElement("summary");
    summary.textContent = "Data table: " + title;
    box.appendChild(summary);
    box.addEventListener("toggle", function () {
      if (!box.open || box.querySelector("table")) { return; }
      var t = given || tableOf(traces);
      var wrap = document.createElement("div"); wrap.className = "table-wrap";
      var table = document.createElement("table"); table.className = "grid compact";
      var cap = document.createElement("caption"); cap.className = "visually-hidden"; cap.textContent = title;
      table.appendChild(cap);
      var thead = table.createTHead().insertRow();
      t.head.forEach(function (h) { var th = document.createElement("th"); th.scope = "col"; th.textContent = h; thead.appendChild(th); });
      var body = table.createTBody();
      t.rows.forEach(function (r) {
        var tr = body.insertRow();
        r.forEach(function (v, i) {
          var c = document.createElement(i ? "td" : "th");
          if (!i) { c.scope = "row"; }
          c.textContent = v; tr.appendChild(c);
        });
      });
      wrap.appendChild(table); box.appendChild(wrap);
    });
    el.insertAdjacentElement("afterend", box);
  }

  /* opts.table ({head: [...], rows: [[...]]}) replaces the table built from the traces,
     for charts whose traces do not read as rows (the allocation bar's segments). */
  function plot(id, traces, layout, opts) {
    var el = document.getElementById(id);
    if (!el) { return null; }
    layout = layout || {};
    if (!hasData(traces)) { empty(el); return null; }
    var base = { margin: { l: 60, r: 20, t: 36, b: 40 }, legend: { orientation: "h", y: -0.2 } };
    var merged = Object.assign(base, layout, themed(layout));
    // Narrow screens: the left margin that holds long item names shrinks.
    if (window.innerWidth < 600 && merged.margin && merged.margin.l > 120) {
      merged.margin = Object.assign({}, merged.margin, { l: 120 });
    }
    // A fixed container height: a responsive plot re-laid out on resize never spills
    // over what follows it.
    if (merged.height) { el.style.height = merged.height + "px"; }
    var title = titleOf(el, layout);
    el.setAttribute("role", "figure");
    el.setAttribute("aria-label", title + " (chart; its data is in the table that follows)");
    Plotly.newPlot(el, traces, merged, config);
    dataTable(el, traces, title, opts && opts.table);
    if (plotted.indexOf(el) < 0) { plotted.push(el); }
    return el;
  }
  /* Dark mode switched while the page is open: re-colour what is not data. */
  if (window.matchMedia) {
    var scheme = window.matchMedia("(prefers-color-scheme: dark)");
    var recolour = function () {
      plotted.forEach(function (el) {
        var t = theme();
        Plotly.relayout(el, { "font.color": t.fg, paper_bgcolor: t.surface, plot_bgcolor: t.surface,
                              "xaxis.gridcolor": t.line, "yaxis.gridcolor": t.line });
      });
    };
    if (scheme.addEventListener) { scheme.addEventListener("change", recolour); }
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
                     color: color, regressionMarkers: regressionMarkers, theme: theme, plain: plain };
})();
