// Copy buttons: <button data-copy="#input-id" data-copied="Copied">. A static file because
// the CSP allows no inline script. Delegated from the document, so buttons that htmx
// swaps in work too; without the clipboard API the text is selected for Ctrl+C instead.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (!button) return;
  var field = document.querySelector(button.getAttribute("data-copy"));
  if (!field) return;
  field.focus();
  field.select();
  var done = function () {
    var label = button.textContent;
    button.textContent = button.getAttribute("data-copied") || "Copied";
    setTimeout(function () { button.textContent = label; }, 2000);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(field.value).then(done, function () {});
  } else if (document.execCommand && document.execCommand("copy")) {
    done();
  }
});
