// Small behaviours the dashboard's htmx pages need; without JavaScript the same pages
// work as plain forms and links.
(function () {
  "use strict";

  // One copy of each item on the page: a finding or working-context item a person just
  // added is shown in its "add" slot at once, and the live poll then brings the same item
  // into its list; when that happens the copy in the add slot goes.
  function dedupe() {
    document.querySelectorAll(".added [id]").forEach(function (element) {
      var same = document.querySelectorAll('[id="' + CSS.escape(element.id) + '"]');
      if (same.length > 1) element.remove();
    });
  }

  document.addEventListener("htmx:afterSettle", dedupe);
  document.addEventListener("htmx:oobAfterSwap", dedupe);

  // A refused action (409 "nothing to revert", 403, 404, a server error) changes nothing
  // on the page; say so instead of leaving the click without an answer. The server's own
  // words are shown as text, never as HTML.
  function notice(text) {
    var box = document.getElementById("notice");
    if (!box) return;
    box.textContent = text;
    box.hidden = false;
  }

  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    var said = (xhr.responseText || "").trim();
    if (said.length > 300 || said.charAt(0) === "<") said = "";
    notice((said || "The server refused this (" + xhr.status + ").") + " Nothing was changed.");
  });
  document.addEventListener("htmx:sendError", function () {
    notice("The server could not be reached. Nothing was changed.");
  });
  document.addEventListener("htmx:beforeRequest", function (event) {
    var box = document.getElementById("notice");
    if (box && !event.detail.elt.closest("#live, #refresh-on-edit, #progress")) box.hidden = true;
  });
})();
