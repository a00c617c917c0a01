/* Click-through: a point or bar that stands for calls opens them. Each chart puts the link
   in its traces' customdata (a call's page for one call, the filtered calls list for a
   bucket); a click follows it. Same-origin paths only: customdata is built by the server,
   but a link is never taken from anywhere else. Load after the page's chart script. */
(function () {
  "use strict";
  function urlOf(point) {
    var c = point && point.customdata;
    if (Array.isArray(c)) { c = c[0]; }
    if (c && typeof c === "object" && !Array.isArray(c)) { c = c.url; }
    return typeof c === "string" && c.charAt(0) === "/" && c.charAt(1) !== "/" ? c : null;
  }
  function linked(el) {
    return (el.data || []).some(function (t) { return t.customdata && t.customdata.length; });
  }
  Array.prototype.forEach.call(document.querySelectorAll(".chart"), function (el) {
    if (typeof el.on !== "function" || !linked(el)) { return; }
    el.classList.add("clickable");
    el.on("plotly_click", function (ev) {
      var url = urlOf(ev.points && ev.points[0]);
      if (url) { window.location.href = url; }
    });
  });
})();
