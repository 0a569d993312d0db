"""A person's notifications, and how they want to be told."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from governance.models import NotificationKind
from governance.selectors import notifications as selectors
from governance.services import notifications as services
from governance.services.errors import ServiceError
from governance.web.errors import apply_service_errors

KIND_CHOICES = NotificationKind.choices


class KeptCheckboxes(forms.CheckboxSelectMultiple):
    """``CheckboxSelectMultiple``, its HTML for a given name, choices, ticks and attributes
    rendered once per process: Django renders each of the 2 x 18 boxes through five
    widget templates, two thirds of the notifications page's time, for HTML that only
    those inputs decide."""

    def render(
        self,
        name: str,
        value: Any,
        attrs: dict[str, Any] | None = None,
        renderer: Any = None,
    ) -> SafeString:
        ticked = tuple(str(v) for v in (value or ()))
        key = (
            name,
            ticked,
            tuple(sorted((attrs or {}).items())),
            tuple(sorted(self.attrs.items())),
            tuple((str(k), str(v)) for k, v in self.choices),
            id(renderer),
        )
        found = _KEPT_HTML.get(key)
        if found is None:
            found = super().render(name, value, attrs, renderer)
            if len(_KEPT_HTML) >= KEPT_HTML_MAX:
                _KEPT_HTML.clear()
            _KEPT_HTML[key] = found
        return found


KEPT_HTML_MAX = 256
_KEPT_HTML: dict[tuple[Any, ...], SafeString] = {}


class PreferencesForm(forms.Form):
    email_kinds = forms.MultipleChoiceField(
        choices=KIND_CHOICES,
        required=False,
        widget=KeptCheckboxes,
        label="Email me when",
    )
    webhook_kinds = forms.MultipleChoiceField(
        choices=KIND_CHOICES,
        required=False,
        widget=KeptCheckboxes,
        label="Post to my webhook when",
    )
    webhook_url = forms.CharField(
        required=False,
        max_length=300,
        label="Webhook URL",
        help_text="Slack-compatible: a JSON body with a 'text' field is posted to it.",
    )


@login_required
def notification_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.notifications_of(request.user), 50).get_page(request.GET.get("page"))
    if request.method == "POST":
        form = PreferencesForm(request.POST)
        if form.is_valid():
            try:
                services.notification_preferences_update(actor=request.user, **form.cleaned_data)
            except ServiceError as exc:
                apply_service_errors(form, exc)
            else:
                messages.success(request, "Notification preferences saved.")
                return redirect("web:notifications")
    else:
        form = PreferencesForm(
            initial=services.preference_snapshot(selectors.preference_of(request.user))
        )
    status = 400 if form.errors else 200
    return render(request, "notifications/list.html", {"page": page, "form": form}, status=status)


@login_required
@require_POST
def notification_read(request: HttpRequest) -> HttpResponse:
    """Mark one notification (``id``) or all of them read, then go where it points."""
    raw = request.POST.get("id", "")
    ids = [int(raw)] if raw.isdecimal() and len(raw) < 19 else None
    services.notifications_mark_read(actor=request.user, ids=ids)
    target = request.POST.get("next", "")
    if target.startswith("/") and not target.startswith("//"):
        return redirect(target)
    return redirect("web:notifications")
