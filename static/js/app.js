// Small page behaviours, each optional: every page works without them.
// A file, not inline scripts: the Content-Security-Policy allows scripts from this origin only.
(function () {
  "use strict";

  // Notes that are true only with JavaScript (e.g. "updates live") are hidden in the HTML.
  function revealJsOnly() {
    document.querySelectorAll(".js-only[hidden]").forEach(function (el) { el.hidden = false; });
  }

  // The job form: each preference row offers only the chosen share's instance types.
  // Every option names the shares that have a limit for it (data-shares); without
  // JavaScript the server lists the chosen share's types once a share is chosen.
  function filterPreferenceTypes(form) {
    var share = form.querySelector("select[name=share]");
    if (!share) { return; }
    var chosen = share.value;
    form.querySelectorAll("select[data-preference-type] option[data-shares]").forEach(function (option) {
      var fits = !chosen || option.getAttribute("data-shares").split(" ").indexOf(chosen) !== -1;
      option.hidden = !fits;
      option.disabled = !fits;
      if (!fits && option.selected) { option.parentElement.value = ""; }
    });
  }

  // Fields that apply to one policy only (the share editor's borrow limit) are disabled
  // while another policy is chosen; a disabled field is not sent, and the server clears it.
  function syncPolicyFields(form) {
    var policy = form.querySelector("select[name=policy]");
    if (!policy) { return; }
    form.querySelectorAll("[data-only-for-policy]").forEach(function (field) {
      field.disabled = policy.value !== field.getAttribute("data-only-for-policy");
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    revealJsOnly();
    document.querySelectorAll("form").forEach(function (form) {
      if (form.querySelector("[data-only-for-policy]")) {
        syncPolicyFields(form);
        form.addEventListener("change", function () { syncPolicyFields(form); });
      }
    });
    document.querySelectorAll("form[data-share-types]").forEach(function (form) {
      filterPreferenceTypes(form);
      form.addEventListener("change", function (event) {
        if (event.target.name === "share") { filterPreferenceTypes(form); }
      });
    });
  });
})();
