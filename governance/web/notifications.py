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

from governance.models import Notification, NotificationKind, NotificationPreference
from governance.selectors import notifications as selectors
from governance.selectors import state_cache
from governance.services import notifications as services
from governance.services.errors import ServiceError
from governance.web import fragments
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


# The list and the preferences form are a fragment (web/fragments.py) of what they read,
# all the viewer's own: their notifications (new ones, and a read mark, which rewrites
# the row: ``rows_version``), their preference row (the form's ticks) and their email
# address (the form says when there is none; Django's admin site changes it without an
# audit entry). Times are slots. A form with problems is rendered, not cached.
PAGE_ARG_MAX = 20  # characters of ``?page=`` kept in the key (the paginator reads no more)


@login_required
def notification_list(request: HttpRequest) -> HttpResponse:
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
        return render(request, "notifications/list.html", _context(request, form), status=400)
    user = request.user
    page_arg = request.GET.get("page", "")[:PAGE_ARG_MAX]
    version = "|".join(
        (
            state_cache.rows_version(Notification, "recipient", user.pk),
            state_cache.rows_version(NotificationPreference, "user", user.pk),
            getattr(user, "email", ""),
        )
    )
    return fragments.page(
        request,
        "notifications",
        "notifications/list.html",
        lambda: _context(request, None, page_arg),
        version=version,
        args=[page_arg],
        viewer=fragments.Viewer.USER,
    )


def _context(
    request: HttpRequest, form: PreferencesForm | None, page_arg: str | None = None
) -> dict[str, Any]:
    """The page's context: ``form`` as posted, or the user's stored preferences."""
    user = request.user
    notifications = selectors.notifications_of(user)
    if form is None:
        form = PreferencesForm(initial=services.preference_snapshot(selectors.preference_of(user)))
    return {
        "page": Paginator(notifications, 50).get_page(
            request.GET.get("page") if page_arg is None else page_arg
        ),
        "form": form,
        "any_unread": notifications.filter(read_at__isnull=True).exists(),
        "has_email": bool(getattr(user, "email", "")),
    }


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
