// The memories page's bulk selection: keeps "N selected" beside the bulk buttons, lets
// one box tick every memory on the page, and keeps a memory ticked when an inline edit,
// archive or history swaps its row for a fresh copy. Without it the page still works:
// the server counts the selection on its confirmation step.
(function () {
  "use strict";

  var ticked = new Set();

  function picks() {
    return Array.from(document.querySelectorAll("#memory-list input.bulk-pick"));
  }

  function update() {
    var form = document.getElementById("bulk-form");
    if (!form) return;
    var all = picks();
    all.forEach(function (box) { box.checked = ticked.has(box.value); });
    var count = all.filter(function (box) { return box.checked; }).length;
    document.getElementById("bulk-count").textContent =
      count === 1 ? "1 memory selected" : count + " memories selected";
    form.querySelectorAll("button[name=action]").forEach(function (button) {
      button.disabled = count === 0;
    });
    var everything = document.getElementById("bulk-all");
    everything.checked = all.length > 0 && count === all.length;
    everything.indeterminate = count > 0 && count < all.length;
    everything.closest("label").hidden = all.length === 0;
  }

  function remember(box) {
    if (box.checked) ticked.add(box.value); else ticked.delete(box.value);
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.id === "bulk-all") {
      picks().forEach(function (box) { box.checked = target.checked; remember(box); });
    } else if (target.classList.contains("bulk-pick")) {
      remember(target);
    } else {
      return;
    }
    update();
  });
  document.addEventListener("htmx:afterSettle", update);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () {
      picks().forEach(remember);  // the browser may restore ticks on "back"
      update();
    });
  } else {
    picks().forEach(remember);
    update();
  }
})();
