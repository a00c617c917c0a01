/* Filter bar: typing a date switches the range to "custom" (a named range wins over
   from/to on the server, so without this a typed date would be ignored); choosing a
   named range clears the dates. Without JavaScript, choose "custom" by hand. */
(function () {
  "use strict";
  var range = document.getElementById("filter-range");
  if (!range) { return; }
  var dates = document.querySelectorAll("#filters input[data-custom]");
  Array.prototype.forEach.call(dates, function (input) {
    input.addEventListener("change", function () { if (input.value) { range.value = "custom"; } });
  });
  range.addEventListener("change", function () {
    if (range.value !== "custom") { Array.prototype.forEach.call(dates, function (i) { i.value = ""; }); }
  });
})();
