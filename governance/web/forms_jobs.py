"""Job forms: the list filters, submission, and reprioritisation.

Forms parse types only; the job service checks every rule (bands, preferences against the
share's limits, counts) and its field errors go back beside the fields.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django import forms

from governance.models import JobKind, JobState
from governance.models.jobs import MAX_PREFERENCES
from governance.models.priorities import MAX_PRIORITY, MIN_PRIORITY
from governance.selectors.filters import WINDOW_FIELDS
from governance.services.errors import ServiceError
from governance.services.jobs import NAME_MAX_LENGTH, OVERRIDE_MAX_LENGTH
from governance.services.limits import DB_INT_MAX, MAX_REASON, MAX_SECONDS
from governance.services.workloads import NOTE_MAX_LENGTH

PREFERENCE_ROWS = MAX_PREFERENCES
# A preference row's value naming a capacity plan rather than an instance type.
PLAN_PREFIX = "plan:"
# An IANA time zone name (the longest is about 30 characters); the service takes the
# deadline already resolved to a time, so the form alone bounds the name it parses.
ZONE_NAME_MAX_LENGTH = 64

# How the job service names a preference (0-based, as the API's JSON): ``preferences[1]``,
# optionally followed by ``.instance_type`` or ``.count``.
_SERVICE_PREFERENCE = re.compile(r"preferences\[(\d+)\](\.instance_type|\.count|\.runtime)?")
# Service fields shown beside another field of the form.
_FIELD_OF = {"deadline": "deadline_date"}

STATE_CHOICES = [("", "any state"), ("active", "pending or running"), *JobState.choices]
KIND_CHOICES = [("", "any kind"), *JobKind.choices]


class JobFilterForm(forms.Form):
    """The job list's filters (GET). Choices are filled by the view from one read each."""

    q = forms.CharField(required=False, label="Name contains")
    queue = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    share = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    team = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    state = forms.ChoiceField(required=False, choices=STATE_CHOICES)
    kind = forms.ChoiceField(required=False, choices=KIND_CHOICES)
    # Shown when given (the workload page links to its jobs with it).
    workload = forms.IntegerField(
        required=False, min_value=1, max_value=DB_INT_MAX, label="Workload id"
    )
    submitted_after = forms.DateTimeField(required=False, label="Submitted from")
    submitted_before = forms.DateTimeField(required=False, label="Submitted before")
    started_after = forms.DateTimeField(required=False, label="Started from")
    started_before = forms.DateTimeField(required=False, label="Started before")
    finished_after = forms.DateTimeField(required=False, label="Finished from")
    finished_before = forms.DateTimeField(required=False, label="Finished before")

    def __init__(
        self,
        *args: Any,
        queues: list[tuple[int, str]],
        shares: list[tuple[int, str]],
        teams: list[tuple[int, str]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["queue"].choices = [("", "any queue"), *queues]  # type: ignore[attr-defined]
        self.fields["share"].choices = [("", "any share"), *shares]  # type: ignore[attr-defined]
        self.fields["team"].choices = [("", "any team"), *teams]  # type: ignore[attr-defined]

    def filters(self) -> dict[str, Any]:
        if not self.is_valid():
            return {}
        data = self.cleaned_data
        return {
            "queue": data.get("queue"),
            "share": data.get("share"),
            "team": data.get("team"),
            "state": data.get("state") or None,
            "kind": data.get("kind") or None,
            "text": data.get("q") or None,
            "workload": data.get("workload"),
            **{name: data.get(name) for name in WINDOW_FIELDS},
        }


def _optional_int(value: Any) -> int | None:
    return None if value in (None, "") else int(value)


class JobSubmitForm(forms.Form):
    share = forms.TypedChoiceField(coerce=int, label="Share")
    name = forms.CharField(max_length=NAME_MAX_LENGTH)
    kind = forms.ChoiceField(choices=JobKind.choices, initial=JobKind.TRAINING)
    priority = forms.IntegerField(
        min_value=MIN_PRIORITY,
        max_value=MAX_PRIORITY,
        initial=0,
        help_text="Higher is more urgent; you may use the bands your role allows.",
    )
    count = forms.IntegerField(
        required=False,
        min_value=1,
        label="Common count",
        help_text="One count for every preference, or leave empty and give a count per row.",
    )
    max_pending = forms.IntegerField(
        required=False,
        min_value=1,
        label="Max pending (seconds)",
        help_text="Give up if not started within this time (accelerated types only).",
    )
    checkpoint_interval = forms.IntegerField(
        required=False, min_value=1, label="Checkpoint interval (seconds of work)"
    )
    duration = forms.IntegerField(
        required=False, min_value=1, label="Duration (seconds of work at speed 1.0)"
    )
    may_borrow = forms.BooleanField(
        required=False,
        initial=True,
        label="May run on borrowed capacity",
        help_text="Untick for work a reclaim would hurt: it then runs only within the "
        "share's limit.",
    )
    preemptible = forms.BooleanField(
        required=False,
        initial=True,
        label="May be stopped for higher-priority work of the share",
        help_text="Untick for work that must not be interrupted (release builds, no "
        "checkpoints); lost capacity and reclaim can still stop it.",
    )
    workload = forms.TypedChoiceField(
        coerce=int,
        required=False,
        empty_value=None,
        label="Workload",
        help_text="The kind of work this job is a run of, of the share's team; a protected "
        "workload never borrows and is never stopped for priority. With no preference rows, "
        "the job takes the workload's preference template.",
    )
    certification_override = forms.CharField(
        required=False,
        max_length=OVERRIDE_MAX_LENGTH,
        label="Certification override (admins)",
        help_text="In a certified-only share: the reason to run preferences that are not "
        "certified for the workload (audited).",
    )
    deadline_date = forms.DateField(required=False, label="Deadline date")
    deadline_time = forms.TimeField(required=False, label="Deadline time")
    deadline_zone = forms.CharField(
        required=False,
        initial="UTC",
        max_length=ZONE_NAME_MAX_LENGTH,
        label="Time zone",
        help_text="e.g. UTC, Europe/Berlin, America/New_York.",
    )
    max_cost = forms.DecimalField(
        required=False,
        min_value=0,
        max_digits=14,
        decimal_places=2,
        label="Budget ($)",
        help_text="The most one run may cost; preferences expected to cost more are passed over.",
    )
    # Not an input: where the service's ``preferences`` and ``queue`` errors are shown.
    preferences = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(
        self,
        *args: Any,
        shares: list[tuple[int, str]],
        type_names: list[str],
        plans: list[tuple[str, str]] | None = None,
        workloads: list[tuple[int, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        """``plans``: (name, label) of the capacity plans the user's shares may name
        (active and upcoming); offered as ``plan:NAME`` beside the instance types."""
        super().__init__(*args, **kwargs)
        self.fields["share"].choices = [("", "choose a share"), *shares]  # type: ignore[attr-defined]
        self.fields["workload"].choices = [("", "none"), *(workloads or [])]  # type: ignore[attr-defined]
        self.plan_options = [(PLAN_PREFIX + name, label) for name, label in plans or []]
        self.type_options = [(name, name) for name in type_names]
        type_choices = [("", "—"), *self.plan_options, *self.type_options]
        for i in range(PREFERENCE_ROWS):
            self.fields[f"pref_type_{i}"] = forms.ChoiceField(
                choices=type_choices, required=False, label=f"Preference {i + 1}"
            )
            self.fields[f"pref_count_{i}"] = forms.IntegerField(
                required=False, min_value=1, label=f"Count {i + 1}"
            )
            self.fields[f"pref_runtime_{i}"] = forms.IntegerField(
                required=False,
                min_value=1,
                max_value=MAX_SECONDS,
                label=f"Expected run time {i + 1} (seconds)",
            )

    def preference_rows(
        self,
    ) -> list[tuple[forms.BoundField, forms.BoundField, forms.BoundField]]:
        return [
            (self[f"pref_type_{i}"], self[f"pref_count_{i}"], self[f"pref_runtime_{i}"])
            for i in range(PREFERENCE_ROWS)
        ]

    def clean_deadline_zone(self) -> str:
        zone = (self.cleaned_data.get("deadline_zone") or "UTC").strip()
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise forms.ValidationError(
                f"{zone} is not a time zone name, e.g. UTC or Europe/Berlin."
            ) from None
        return zone

    def deadline(self) -> datetime | None:
        """The deadline as an aware datetime (None: none given)."""
        data = self.cleaned_data
        day, moment = data.get("deadline_date"), data.get("deadline_time")
        if day is None or moment is None:
            return None
        return datetime.combine(day, moment, tzinfo=ZoneInfo(data.get("deadline_zone") or "UTC"))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        prefs: list[dict[str, Any]] = []
        for i in range(PREFERENCE_ROWS):
            type_name = data.get(f"pref_type_{i}")
            count = data.get(f"pref_count_{i}")
            if not type_name and count is None:
                continue
            if not type_name:
                self.add_error(f"pref_type_{i}", "Choose an instance type for this count.")
                continue
            pref: dict[str, Any] = (
                {"plan": type_name.removeprefix(PLAN_PREFIX)}
                if type_name.startswith(PLAN_PREFIX)
                else {"instance_type": type_name}
            )
            if count is not None:
                pref["count"] = count
            runtime = data.get(f"pref_runtime_{i}")
            if runtime is not None:
                pref["runtime"] = runtime
            prefs.append(pref)
        data["preference_list"] = prefs
        # Which form row each sent preference came from (empty rows are skipped).
        data["preference_rows"] = [
            i
            for i in range(PREFERENCE_ROWS)
            if data.get(f"pref_type_{i}") or data.get(f"pref_count_{i}") is not None
        ]
        if (data.get("deadline_date") is None) != (data.get("deadline_time") is None):
            self.add_error("deadline_date", "Give both the date and the time of the deadline.")
        return data

    def apply_service_errors(self, exc: ServiceError) -> None:
        """The service's errors beside their fields; a message about one preference goes
        beside its row, in the page's words ("preference 2", counted from 1 as the rows
        are) instead of the API's ``preferences[1].count``."""
        rows: list[int] = self.cleaned_data.get("preference_rows", [])

        def row_of(index: int) -> int:
            return rows[index] if index < len(rows) else index

        for field, messages in exc.errors.items():
            for message in messages:
                named = list(_SERVICE_PREFERENCE.finditer(message))
                if field == "preferences" and len(named) == 1 and named[0].start() == 0:
                    row = row_of(int(named[0].group(1)))
                    part = named[0].group(2)
                    target = {".count": "pref_count_", ".runtime": "pref_runtime_"}.get(
                        part or "", "pref_type_"
                    )
                    # "preferences[1]: ..." (certified-only shares) reads as "preferences[1] ..."
                    text = message[named[0].end() :].lstrip(": ")
                    if part == ".count":
                        text = f"the count {text}"
                    elif part == ".runtime":
                        text = f"the expected run time {text}"
                    elif text.startswith("is required"):
                        text = "choose an instance type."
                    self.add_error(f"{target}{row}", f"Preference {row + 1}: {text}")
                    continue
                text = _SERVICE_PREFERENCE.sub(
                    lambda m: f"preference {row_of(int(m.group(1))) + 1}", message
                )
                field = _FIELD_OF.get(field, field)
                target_field = field if field in self.fields else None
                if target_field is None and field not in ("non_field_errors", "detail"):
                    text = f"{field}: {text}"
                self.add_error(target_field, text)

    def service_kwargs(self) -> dict[str, Any]:
        """The service's arguments; a field that did not parse is None (the service then
        still checks the others: ``errors.check_with_service``)."""
        data = self.cleaned_data
        return {
            "share": data.get("share"),
            "name": data.get("name"),
            "kind": data.get("kind"),
            "priority": data.get("priority"),
            "preferences": data.get("preference_list", []),
            "count": _optional_int(data.get("count")),
            "max_pending": _optional_int(data.get("max_pending")),
            "checkpoint_interval": _optional_int(data.get("checkpoint_interval")),
            "duration": _optional_int(data.get("duration")),
            "may_borrow": bool(data.get("may_borrow")),
            "preemptible": bool(data.get("preemptible")),
            "deadline": self.deadline(),
            "max_cost": data.get("max_cost"),
            "workload": data.get("workload"),
            "certification_override": data.get("certification_override") or "",
        }


class ReprioritiseForm(forms.Form):
    priority = forms.IntegerField(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY)
    reason = forms.CharField(required=False, max_length=MAX_REASON)


class CancelForm(forms.Form):
    reason = forms.CharField(required=False, max_length=MAX_REASON)


class OutputForm(forms.Form):
    """A lead's verdict on a resumed run's output (docs/workloads.md)."""

    valid = forms.TypedChoiceField(
        choices=[("true", "valid"), ("false", "invalid")], coerce=lambda v: v == "true"
    )
    note = forms.CharField(required=False, max_length=NOTE_MAX_LENGTH)
