// Forms with data-confirm ask before they submit. A file, not an inline onsubmit: the
// Content-Security-Policy allows scripts from this origin only.
document.addEventListener("submit", function (event) {
  var form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.getAttribute("data-confirm"))) {
    event.preventDefault();
  }
}, true);
