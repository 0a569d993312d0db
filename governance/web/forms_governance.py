"""Forms of the governance pages. They only parse input; the services decide and write.

Field names equal the service (API) field names so a ServiceError's field-keyed
messages land beside the right input (``apply_service_errors``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django import forms
from django.utils import timezone

from governance.models import Job, Share
from governance.models.priorities import MAX_PRIORITY, MIN_PRIORITY, NAME_MAX_LENGTH, BandRole
from governance.services.agreements import MAX_NOTE, TITLE_MAX_LENGTH
from governance.services.promises import MAX_WINDOW_DAYS

DATETIME_LOCAL = "%Y-%m-%dT%H:%M"


class DateTimeLocalInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(format=DATETIME_LOCAL, **kwargs)


def bounded_input(minimum: int, maximum: int) -> forms.NumberInput:
    """A number input whose browser hints are the service's bounds: the form only parses
    the number, the service checks the range and says the rule in words (one home for
    each rule, so the page and the API report it alike and at once)."""
    return forms.NumberInput(attrs={"min": minimum, "max": maximum})


def htmx_target(request: Any) -> str | None:
    """The id of the element an htmx request swaps (None for ordinary requests)."""
    details = getattr(request, "htmx", None)
    return details.target if details else None


def _choice_field(form: forms.Form, name: str) -> forms.ChoiceField:
    field = form.fields[name]
    assert isinstance(field, forms.ChoiceField)
    return field


def _job_label(job: Job) -> str:
    where = f"{job.share.team.name}/{job.share.name}"
    return f"#{job.pk} {job.name} ({where}, {job.state.lower()}, priority {job.priority})"


def _share_label(share: Share) -> str:
    return f"{share.team.name}: {share.queue.name}/{share.name}"


class ExceptionFileForm(forms.Form):
    """Filing an exception: one target (a job or a share of a team the user leads)."""

    job = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    share = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    priority = forms.IntegerField(widget=bounded_input(MIN_PRIORITY, MAX_PRIORITY))
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}))
    wanted_by = forms.DateTimeField(required=False, widget=DateTimeLocalInput())
    expires_at = forms.DateTimeField(widget=DateTimeLocalInput())

    def __init__(self, *args: Any, jobs: list[Job], shares: list[Share], **kwargs: Any) -> None:
        # A week from now unless given; other initial values (a job chosen on its page)
        # come on top.
        kwargs["initial"] = {
            "expires_at": (timezone.localtime() + timedelta(days=7)).replace(
                second=0, microsecond=0
            ),
            **(kwargs.get("initial") or {}),
        }
        super().__init__(*args, **kwargs)
        # The times typed are read in the site's time zone (UTC unless configured): say so.
        zone = timezone.get_current_timezone_name()
        self.fields["wanted_by"].label = f"Wanted by ({zone}, optional)"
        self.fields["expires_at"].label = f"Expires at ({zone})"
        self.jobs = {j.pk: j for j in jobs}
        self.shares = {s.pk: s for s in shares}
        _choice_field(self, "job").choices = [("", "— no job (use a share) —")] + [
            (j.pk, _job_label(j)) for j in jobs
        ]
        _choice_field(self, "share").choices = [("", "— no share (use a job) —")] + [
            (s.pk, _share_label(s)) for s in shares
        ]

    def team_id(self) -> int | None:
        """The team of the chosen target (the service checks the actor leads it)."""
        job_id = self.cleaned_data.get("job")
        share_id = self.cleaned_data.get("share")
        if job_id in self.jobs:
            return self.jobs[job_id].share.team_id
        if share_id in self.shares:
            return self.shares[share_id].team_id
        any_target = next(iter(self.jobs.values()), None) or next(iter(self.shares.values()), None)
        if any_target is None:
            return None
        return any_target.share.team_id if isinstance(any_target, Job) else any_target.team_id


class DecisionForm(forms.Form):
    """Approve, reject or withdraw: a note for the record."""

    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class ExceptionFilterForm(forms.Form):
    state = forms.ChoiceField(required=False)
    team = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)

    def __init__(self, *args: Any, teams: list[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from governance.models import ExceptionState

        _choice_field(self, "state").choices = [("", "Any state"), *ExceptionState.choices]
        _choice_field(self, "team").choices = [("", "Any team")] + [(t.pk, t.name) for t in teams]


class PromiseFields(forms.Form):
    """The agreement form's promises (docs/agreements.md#promises): the ones in force,
    each with a box to withdraw it, and one new promise: a figure chosen from the
    signals' own list, a share or team of the agreement, a comparison, a threshold and a
    window. Its fields are prefixed ``promise_`` so a service error
    ``promises[i].FIELD`` of the new one lands beside its field."""

    withdraw = forms.TypedMultipleChoiceField(
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Withdraw promises",
    )
    promise_figure = forms.ChoiceField(required=False, label="Figure")
    promise_subject = forms.ChoiceField(required=False, label="For")
    promise_comparison = forms.ChoiceField(
        required=False, choices=[("<=", "at most (<=)"), (">=", "at least (>=)")], label="Is"
    )
    promise_threshold = forms.FloatField(
        required=False, label="Threshold", help_text="seconds for times; 0 to 1 for fractions"
    )
    promise_window_days = forms.IntegerField(
        required=False,
        initial=30,
        label="Over the last (days)",
        widget=bounded_input(1, MAX_WINDOW_DAYS),
    )

    def setup(self, *, figures: Iterable[str], shares: list[Share], promises: list[Any]) -> None:
        """Choices: the promisable figures, the shares (and their teams) to promise for,
        and the promises in force (to withdraw)."""
        _choice_field(self, "promise_figure").choices = [("", "— no new promise —")] + [
            (f, f) for f in figures
        ]
        subjects = [(f"share:{s.pk}", f"share {s.queue.name}/{s.name}") for s in shares]
        teams = {(s.team_id, s.queue_id): s for s in shares}
        subjects += [
            (f"team:{team}:{queue}", f"team {s.team.name} on {s.queue.name}")
            for (team, queue), s in sorted(teams.items())
        ]
        _choice_field(self, "promise_subject").choices = subjects
        _choice_field(self, "withdraw").choices = [(p.pk, str(p)) for p in promises]

    def new_promise(self) -> dict[str, Any] | None:
        """The new promise as the service takes it (None when no figure is chosen)."""
        data = self.cleaned_data
        if not data.get("promise_figure"):
            return None
        kind, _, rest = (data.get("promise_subject") or "").partition(":")
        subject: dict[str, Any] = {"share": None, "team": None}
        if kind == "share" and rest.isdecimal():
            subject["share"] = int(rest)
        elif kind == "team":
            team, _, queue = rest.partition(":")
            subject.update(team=int(team), queue=int(queue))
        return {
            "figure": data["promise_figure"],
            **subject,
            "comparison": data.get("promise_comparison"),
            "threshold": data.get("promise_threshold"),
            "window_days": data.get("promise_window_days"),
        }


PROMISE_ERROR_FIELDS = {
    "figure": "promise_figure",
    "share": "promise_subject",
    "team": "promise_subject",
    "queue": "promise_subject",
    "comparison": "promise_comparison",
    "threshold": "promise_threshold",
    "window_days": "promise_window_days",
}


class AgreementForm(PromiseFields):
    title = forms.CharField(max_length=TITLE_MAX_LENGTH)
    body = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}))
    reclaim_assumptions = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Reclaim the owner accepts"
    )
    recovery_assumptions = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Recovery assumptions"
    )
    shares = forms.TypedMultipleChoiceField(coerce=int, required=False)
    owner = forms.ChoiceField(required=False)
    editors = forms.MultipleChoiceField(required=False)
    review_by = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why this change? It is kept with the version.",
    )
    version = forms.IntegerField(required=False, widget=forms.HiddenInput())

    def __init__(
        self,
        *args: Any,
        shares: list[Share],
        usernames: list[str],
        people_editable: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        _choice_field(self, "shares").choices = [(s.pk, _share_label(s)) for s in shares]
        _choice_field(self, "owner").choices = [("", "— me —")] + [(u, u) for u in usernames]
        _choice_field(self, "editors").choices = [(u, u) for u in usernames]
        self.people_editable = people_editable
        if not people_editable:
            self.fields["owner"].disabled = True
            self.fields["editors"].disabled = True


class ReviewForm(forms.Form):
    """Recording a review of an agreement: what it found and the next date."""

    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=MAX_NOTE,
        label="What the review found",
        help_text="Kept with the new version, even if nothing else changes.",
    )
    review_by = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        label="Next review by",
    )
    version = forms.IntegerField(widget=forms.HiddenInput())


class PriorityDefinitionForm(forms.Form):
    name = forms.CharField(max_length=NAME_MAX_LENGTH)
    min_priority = forms.IntegerField(widget=bounded_input(MIN_PRIORITY, MAX_PRIORITY))
    max_priority = forms.IntegerField(widget=bounded_input(MIN_PRIORITY, MAX_PRIORITY))
    criteria = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))
    usable_by = forms.MultipleChoiceField(
        required=False,
        choices=BandRole.choices,
        widget=forms.CheckboxSelectMultiple,
        label="May use without approval",
    )
    exception_owner = forms.ChoiceField(required=False, label="Exception owner")
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args: Any, usernames: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _choice_field(self, "exception_owner").choices = [("", "— none —")] + [
            (u, u) for u in usernames
        ]
