"""The decision page (docs/workloads.md#decisions): a job failed by its retry limit and
what its team's leads decided, or the three ways to decide while it is open: resubmit a
prefilled copy (other preferences or a capacity plan), reclassify its workload as
protected, or close it with a reason. Every problem of a form at once."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from governance.models import Decision, DecisionState
from governance.models.jobs import MAX_PREFERENCES
from governance.models.priorities import MAX_PRIORITY
from governance.selectors import decisions as decision_selectors
from governance.selectors import state_cache
from governance.services import decisions as decision_services
from governance.services import resubmissions
from governance.services.errors import ServiceError
from governance.web import fragments
from governance.web.errors import apply_service_errors, check_with_service

# One preference a line: "ml.g6.xlarge 2" or "plan NAME 2" (the count may be left out
# when the job gives one count for all).
_LINE = re.compile(r"^(?:(plan)\s+)?(\S+)(?:\s+(\d{1,6}))?$")


def preferences_text(preferences: list[dict[str, Any]]) -> str:
    """A preference list as the form's lines."""
    lines = []
    for pref in preferences:
        head = f"plan {pref['plan']}" if pref.get("plan") else str(pref.get("instance_type"))
        lines.append(f"{head} {pref['count']}" if pref.get("count") else head)
    return "\n".join(lines)


class _Form(forms.Form):
    """Three forms share the page: each names its inputs' ids after its answer."""

    answer = "form"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", f"{self.answer}_%s")
        super().__init__(*args, **kwargs)


class ResubmitForm(_Form):
    answer = "resubmit"
    name = forms.CharField(max_length=200, help_text="The new job's name.")
    priority = forms.IntegerField(min_value=0, max_value=MAX_PRIORITY)
    preferences = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=2000,
        help_text='One a line, in order: "ml.g6.xlarge 2", or "plan NAME 2" for a capacity '
        "plan of the share.",
    )
    note = forms.CharField(
        required=False,
        max_length=decision_services.NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why this answer (optional).",
    )

    def clean_preferences(self) -> list[dict[str, Any]]:
        lines = [ln.strip() for ln in self.cleaned_data["preferences"].splitlines() if ln.strip()]
        if not lines or len(lines) > MAX_PREFERENCES:
            raise forms.ValidationError(f"Give 1 to {MAX_PREFERENCES} preferences, one a line.")
        parsed = []
        for number, line in enumerate(lines, start=1):
            found = _LINE.match(line)
            if found is None:
                raise forms.ValidationError(
                    f'Line {number} ("{line[:60]}"): write "TYPE COUNT" or "plan NAME COUNT".'
                )
            plan, name, count = found.groups()
            pref: dict[str, Any] = {"plan": name} if plan else {"instance_type": name}
            pref["count"] = int(count) if count else None
            parsed.append(pref)
        return parsed


class NoteForm(_Form):
    answer = "reclassify"
    note = forms.CharField(
        required=False,
        max_length=decision_services.NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class CloseForm(_Form):
    answer = "close"
    reason = forms.CharField(
        max_length=decision_services.NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why the work is not run again (required).",
    )


def _decision(pk: int) -> Decision:
    found = decision_selectors.decisions().filter(pk=pk).first()
    if found is None:
        raise Http404("No such decision.")
    return found


def _render(
    request: HttpRequest, decision: Decision, status: int = 200, **forms_given: forms.Form
) -> HttpResponse:
    """The page with a form's problems: rendered for this request, not cached."""
    context = _context(request, decision, **forms_given)
    return render(request, "decisions/detail.html", context, status=status)


def _context(request: HttpRequest, decision: Decision, **forms_given: forms.Form) -> dict[str, Any]:
    defaults = resubmissions.resubmit_defaults(decision.job)
    return {
        "decision": decision,
        "overdue": decision_selectors.overdue(decision, timezone.now()),
        "may_decide": decision.state == DecisionState.OPEN
        and decision_services.may_decide(request.user, decision.team_id),
        "resubmit_form": forms_given.get("resubmit")
        or ResubmitForm(
            initial={
                "name": defaults["name"],
                "priority": defaults["priority"],
                "preferences": preferences_text(defaults["preferences"]),
            }
        ),
        "reclassify_form": forms_given.get("reclassify") or NoteForm(),
        "close_form": forms_given.get("close") or CloseForm(),
    }


# The page (as a GET shows it) is a fragment (web/fragments.py) of what it reads: the
# decision's row (a reminder is marked on it without an audit entry: ``rows_version``),
# its job and the defaults of a resubmission (its workload's template: job events and
# audit entries, ``state_cache.page_version``). It falls overdue with time alone
# (BUCKET_SECONDS). Per rights: the team's leads and admins answer it.
BUCKET_SECONDS = 60


@login_required
def decision_detail(request: HttpRequest, pk: int) -> HttpResponse:
    # Its title for the page around the fragment (the full read, a join of a hundred
    # columns, only on a miss).
    title = Decision.objects.filter(pk=pk).values("pk", "job__name").first()
    if title is None:
        raise Http404("No such decision.")
    version = "|".join((state_cache.page_version(), state_cache.rows_version(Decision, "id", pk)))
    return fragments.page(
        request,
        "decision",
        "decisions/detail.html",
        lambda: _context(request, _decision(pk)),
        version=version,
        args=[pk],
        bucket=BUCKET_SECONDS,
        around={"decision": {"pk": title["pk"], "job": {"name": title["job__name"]}}},
    )


def _answer_resubmit(request: HttpRequest, decision: Decision) -> tuple[forms.Form, Any]:
    form = ResubmitForm(request.POST)

    def call(data: dict[str, Any]) -> Any:
        changes = {k: data.get(k) for k in ("name", "priority", "preferences")}
        return resubmissions.decision_resubmit(
            actor=request.user, decision=decision.pk, changes=changes, note=data.get("note", "")
        )

    if not form.is_valid():
        data = {k: form.cleaned_data.get(k) for k in ("name", "priority", "preferences", "note")}
        check_with_service(form, lambda: call(data))
        return form, None
    return form, lambda: call(form.cleaned_data)


def _answer_reclassify(request: HttpRequest, decision: Decision) -> tuple[forms.Form, Any]:
    form = NoteForm(request.POST)
    if not form.is_valid():
        return form, None
    return form, lambda: decision_services.decision_reclassify(
        actor=request.user, decision=decision.pk, note=form.cleaned_data["note"]
    )


def _answer_close(request: HttpRequest, decision: Decision) -> tuple[forms.Form, Any]:
    form = CloseForm(request.POST)
    if not form.is_valid():
        return form, None
    return form, lambda: decision_services.decision_close(
        actor=request.user, decision=decision.pk, reason=form.cleaned_data["reason"]
    )


ANSWERS = {
    "resubmit": (_answer_resubmit, "resubmitted"),
    "reclassify": (_answer_reclassify, "answered: its workload is now protected"),
    "close": (_answer_close, "closed"),
}


@login_required
@require_POST
def decision_answer(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """One of the three answers; on any problem the page comes back with every message
    beside its field and nothing changed."""
    if action not in ANSWERS:
        raise Http404("Unknown answer.")
    decision = _decision(pk)
    build, done = ANSWERS[action]
    form, call = build(request, decision)
    if call is not None:
        try:
            call()
        except ServiceError as error:
            apply_service_errors(form, error)
            return _render(request, decision, status=error.status, **{action: form})
        messages.success(request, f"Decision {pk} {done}.")
        return redirect("web:decision", pk)
    return _render(request, decision, status=400, **{action: form})
