// A wide table scrolls sideways in its own box (app.css: every table on a phone, and the
// .table-wrap / .table-scroll boxes), never the page. A box that scrolls and holds no link or
// control of its own cannot be scrolled from the keyboard: it gets a tab stop (WCAG 2.1.1),
// looked at again when the page is resized or a script fills a table (the call view's what-if
// replay, the live tail).
(function () {
  "use strict";
  var FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]";

  function mark() {
    var boxes = document.querySelectorAll("table.grid, .table-wrap, .table-scroll");
    for (var i = 0; i < boxes.length; i++) {
      var box = boxes[i];
      var scrolls = box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX !== "visible";
      if (box.getAttribute("data-scroll-stop") === "1") {
        if (!scrolls) { box.removeAttribute("tabindex"); box.removeAttribute("data-scroll-stop"); }
      } else if (scrolls && !box.hasAttribute("tabindex") && !box.querySelector(FOCUSABLE)) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("data-scroll-stop", "1");
      }
    }
  }

  var pending = 0;
  function later() {
    clearTimeout(pending);
    pending = setTimeout(mark, 150);
  }

  function start() {
    mark();
    new MutationObserver(later).observe(document.body, { childList: true, subtree: true });
  }

  window.addEventListener("resize", later);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
