// One copy of each item on the page: a finding or working-context item a person just
// added is shown in its "add" slot at once, and the live poll then brings the same item
// into its list; when that happens the copy in the add slot goes. Without JavaScript
// there is no live poll, so nothing is shown twice.
(function () {
  "use strict";

  function dedupe() {
    document.querySelectorAll(".added [id]").forEach(function (element) {
      var same = document.querySelectorAll('[id="' + CSS.escape(element.id) + '"]');
      if (same.length > 1) element.remove();
    });
  }

  document.addEventListener("htmx:afterSettle", dedupe);
  document.addEventListener("htmx:oobAfterSwap", dedupe);
})();
