/* Live tail (docs/dashboard.md, "Live"): asks the feed every second for the calls that
   arrived after the cursor and puts them at the top of the table, newest first, keeping at
   most data-window rows. Each poll asks again from the cursor it had OVERLAP_MS ago, so a
   call whose ingest transaction committed after a later-numbered one still shows; rows
   already shown are matched by id (and redrawn once their analysed figures arrive). The
   answer carries an ETag: nothing new is a 304 with no body. Every value is set as text. */
(function () {
  "use strict";
  var table = document.getElementById("live");
  if (!table || !window.fetch) { return; }
  var body = table.tBodies[0];
  var feed = table.getAttribute("data-feed");
  var keep = parseInt(table.getAttribute("data-window"), 10) || 200;
  var every = parseInt(table.getAttribute("data-poll"), 10) || 1000;
  var qs = table.getAttribute("data-qs") || "";
  var toggle = document.getElementById("live-toggle");
  var status = document.getElementById("live-status");
  var skipped = document.getElementById("live-skipped");
  var OVERLAP_MS = 10000, RETRY_MS = 5000;
  // (time, cursor) pairs: the poll sends the newest cursor that is at least OVERLAP_MS old.
  var cursors = [{ at: 0, cursor: table.getAttribute("data-cursor") || "0" }];
  var shown = {};
  var paused = false, timer = null, generation = 0, etag = null, etagFor = null;

  Array.prototype.forEach.call(body.rows, function (tr) {
    var id = tr.getAttribute("data-id");
    if (id) { shown[id] = tr; }
  });

  function text(tag, value, cls) {
    var el = document.createElement(tag);
    el.textContent = value;
    if (cls) { el.className = cls; }
    return el;
  }

  function cell(tr, content, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    if (content !== null && content !== undefined) {
      if (typeof content === "object") { td.appendChild(content); } else { td.textContent = content; }
    }
    tr.appendChild(td);
    return td;
  }

  function link(href, label) {
    var a = text("a", label);
    a.setAttribute("href", href + qs);
    return a;
  }

  function badge(value, good, plain) {
    return text("span", value, "badge" + (value === good ? " ok" : value === plain ? "" : " bad"));
  }

  function buildRow(c) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-id", String(c.id));
    tr.setAttribute("data-call", c.call_id);
    tr.setAttribute("data-analysed", c.analysed ? "1" : "0");
    var time = text("time", c.started);
    time.setAttribute("datetime", c.started_at);
    cell(tr, time, "time");
    cell(tr, link(c.url, c.call_id), "id");
    cell(tr, link(c.run_url, c.run_id), "id");
    cell(tr, String(c.step), "num");
    cell(tr, c.agent, "name");
    cell(tr, c.model, "name");
    cell(tr, c.status ? badge(c.status, "ok", null) : null);
    cell(tr, String(c.input_tokens), "num");
    cell(tr, c.hit || "–", "num");
    var cache = cell(tr, c.cache ? badge(c.cache, "hit", "below_minimum") : null);
    if (c.cache_segment) { cache.appendChild(document.createTextNode(" " + c.cache_segment)); }
    cell(tr, c.evidence_missing ? text("span", c.evidence, "missing") : c.evidence, "num");
    cell(tr, c.cost || "–", "num");
    return tr;
  }

  function place(tr, id) {
    // Newest first by arrival: before the first shown row with a smaller id.
    var rows = body.rows;
    for (var i = 0; i < rows.length; i++) {
      var other = parseInt(rows[i].getAttribute("data-id"), 10);
      if (!isNaN(other) && other < id) { body.insertBefore(tr, rows[i]); return; }
    }
    body.appendChild(tr);
  }

  function show(calls) {
    var added = 0;
    // Oldest first, so that each new row lands above the ones before it.
    for (var i = calls.length - 1; i >= 0; i--) {
      var c = calls[i], key = String(c.id), old = shown[key];
      if (old) {
        if (c.analysed && old.getAttribute("data-analysed") !== "1") {
          var fresh = buildRow(c);
          old.parentNode.replaceChild(fresh, old);
          shown[key] = fresh;
        }
        continue;
      }
      var tr = buildRow(c);
      tr.className = "arrived";
      place(tr, c.id);
      shown[key] = tr;
      added++;
    }
    if (added) {
      var empty = document.getElementById("live-empty");
      if (empty) { empty.parentNode.removeChild(empty); }
    }
    var rows = body.rows;
    while (rows.length > keep) {
      var last = rows[rows.length - 1];
      delete shown[last.getAttribute("data-id")];
      body.removeChild(last);
    }
    return added;
  }

  function clock() {
    return new Date().toISOString().slice(11, 19) + " UTC";
  }

  function say(message) {
    if (status.textContent !== message) { status.textContent = message; }
  }

  function after(now) {
    while (cursors.length > 1 && cursors[1].at <= now - OVERLAP_MS) { cursors.shift(); }
    return cursors[0].cursor;
  }

  function remember(now, cursor) {
    if (cursor !== cursors[cursors.length - 1].cursor) { cursors.push({ at: now, cursor: cursor }); }
  }

  function schedule(ms) {
    clearTimeout(timer);
    timer = paused ? null : setTimeout(poll, ms);
  }

  function poll() {
    if (paused) { return; }
    if (document.hidden) { schedule(every); return; }
    var mine = generation, now = Date.now(), from = after(now);
    var url = feed + (feed.indexOf("?") === -1 ? "?" : "&") + "after=" + encodeURIComponent(from);
    var headers = { Accept: "application/json" };
    if (etag && etagFor === url) { headers["If-None-Match"] = etag; }
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (r) {
        if (r.status === 304) { return null; }
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        etag = r.headers.get("ETag");
        etagFor = url;
        return r.json();
      })
      .then(function (answer) {
        if (mine !== generation) { return; }  // paused meanwhile: drop what it brought
        if (answer) {
          remember(now, answer.cursor);
          show(answer.calls);
          skipped.hidden = !answer.truncated;
        }
        say("Live: checked at " + clock() + ".");
        schedule(every);
      })
      .catch(function () {
        if (mine !== generation) { return; }
        say("Cannot reach the server; trying again in a few seconds.");
        schedule(RETRY_MS);
      });
  }

  function setPaused(on) {
    paused = on;
    generation++;
    toggle.textContent = on ? "Resume" : "Pause";
    if (on) {
      clearTimeout(timer);
      say("Paused: new calls are not shown until you resume.");
    } else {
      say("Live: catching up…");
      poll();
    }
  }

  toggle.addEventListener("click", function () { setPaused(!paused); });
  document.addEventListener("visibilitychange", function () { if (!document.hidden && !paused) { schedule(0); } });
  schedule(every);
})();
