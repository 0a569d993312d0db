"""List filters (django-filter), one per listing, used by the API and the pages alike.

A filter's query parameters are the same wherever it is used, so a page's export link
and an API call with the page's query string list the same rows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from django.utils import timezone
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import extend_schema_field

from governance.models import (
    AuditEntry,
    AuditEvent,
    CapacityPlan,
    ChangeRequestState,
    Decision,
    DecisionState,
    ExceptionState,
    Interruption,
    Job,
    JobKind,
    JobState,
    PlanState,
    PriorityException,
    RecoveryStatus,
    ShareChangeRequest,
    Workload,
)
from governance.models.jobs import ACTIVE_STATES


class StrictBooleanField(forms.NullBooleanField):
    """``true`` or ``false`` (any case), or nothing: no filter. Django's boolean widgets
    read anything else as "no filter", so a mistyped ``?overdue=perhaps`` listed every
    row; this field reads the raw text (a plain text widget) and refuses it, a 400 naming
    the parameter and the values it takes."""

    widget = forms.TextInput

    # NullBooleanField's own answer is None too; the stubs type it as BooleanField's.
    def to_python(self, value: Any) -> bool | None:  # type: ignore[override]
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("true", "false"):
            return text == "true"
        raise forms.ValidationError(
            "Must be true or false (or left out for no filter).", code="invalid"
        )

    def validate(self, value: Any) -> None:
        return None


class StrictBooleanFilter(django_filters.BooleanFilter):
    """A boolean list filter that refuses what is neither true nor false
    (``StrictBooleanField``)."""

    field_class = StrictBooleanField


def user_filter(queryset: QuerySet[Any], field: str, value: str) -> QuerySet[Any]:
    """Match a user given as a username or a numeric id."""
    condition = Q(**{f"{field}__username": value})
    if value.isdecimal() and len(value) < 12:
        condition |= Q(**{f"{field}_id": int(value)})
    return queryset.filter(condition)


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, given to the database in UTC. PostgreSQL refuses offsets beyond
    +-15:59 that Python accepts (up to +-23:59), and a time near the calendar's ends may
    not exist in UTC at all: either is a 400 naming the parameter, never a server error."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None or parsed.tzinfo is None:
            return parsed
        try:
            return parsed.astimezone(UTC)
        except (OverflowError, ValueError) as exc:
            raise forms.ValidationError("A time that exists in UTC (year 1 to 9999).") from exc


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


WINDOW_FIELDS = (
    "submitted_after",
    "submitted_before",
    "started_after",
    "started_before",
    "finished_after",
    "finished_before",
)


class JobFilter(django_filters.FilterSet):
    queue = django_filters.NumberFilter(field_name="queue_id")
    share = django_filters.NumberFilter(field_name="share_id")
    team = django_filters.NumberFilter(field_name="share__team_id")
    state = django_filters.ChoiceFilter(
        choices=[("active", "Pending or running"), *JobState.choices], method="filter_state"
    )
    q = django_filters.CharFilter(method="filter_name", label="name contains")
    kind = django_filters.ChoiceFilter(choices=JobKind.choices)
    submitter = django_filters.CharFilter(method="filter_submitter", label="username or id")
    plan = django_filters.NumberFilter(
        field_name="plan_id", label="capacity plan id (its current or last run)"
    )
    workload = django_filters.NumberFilter(field_name="workload_id", label="workload id")
    # Time windows [after, before): what the Signals page links to for its figures.
    submitted_after = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")
    started_after = UtcIsoDateTimeFilter(field_name="started_at", lookup_expr="gte")
    started_before = UtcIsoDateTimeFilter(field_name="started_at", lookup_expr="lt")
    finished_after = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="lt")

    class Meta:
        model = Job
        fields = [
            "queue",
            "share",
            "team",
            "state",
            "kind",
            "submitter",
            "q",
            "plan",
            "workload",
            *WINDOW_FIELDS,
        ]

    def filter_state(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        if value == "active":
            return queryset.filter(state__in=ACTIVE_STATES)
        return queryset.filter(state=value)

    def filter_name(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(name__icontains=value.strip())

    def filter_submitter(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return user_filter(queryset, "submitter", value)


class ExceptionFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=ExceptionState.choices)
    team = django_filters.NumberFilter(field_name="team_id")
    share = django_filters.NumberFilter(field_name="share_id")
    job = django_filters.NumberFilter(field_name="job_id")
    requester = django_filters.CharFilter(method="filter_requester", label="username or id")

    class Meta:
        model = PriorityException
        fields = ["state", "team", "share", "job", "requester"]

    def filter_requester(
        self, queryset: QuerySet[PriorityException], name: str, value: str
    ) -> QuerySet[PriorityException]:
        return user_filter(queryset, "requester", value)


OVERDUE = "open and past due (true), or not (false); anything else is refused (400)"


class DecisionFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=DecisionState.choices)
    team = django_filters.NumberFilter(field_name="team_id")
    job = django_filters.NumberFilter(field_name="job_id")
    overdue = StrictBooleanFilter(method="filter_overdue", label=OVERDUE)

    class Meta:
        model = Decision
        fields = ["state", "team", "job", "overdue"]

    @extend_schema_field({"type": "boolean", "description": OVERDUE})
    def filter_overdue(
        self, queryset: QuerySet[Decision], name: str, value: bool | None
    ) -> QuerySet[Decision]:
        if value is None:
            return queryset
        late = Q(state=DecisionState.OPEN, due_at__lte=timezone.now())
        return queryset.filter(late) if value else queryset.exclude(late)


class ChangeRequestFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=ChangeRequestState.choices)
    team = django_filters.NumberFilter(field_name="team_id")
    share = django_filters.NumberFilter(field_name="share_id")
    queue = django_filters.NumberFilter(field_name="share__queue_id")
    requester = django_filters.CharFilter(method="filter_requester", label="username or id")

    class Meta:
        model = ShareChangeRequest
        fields = ["state", "team", "share", "queue", "requester"]

    def filter_requester(
        self, queryset: QuerySet[ShareChangeRequest], name: str, value: str
    ) -> QuerySet[ShareChangeRequest]:
        return user_filter(queryset, "requester", value)


class AuditFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(method="filter_actor", label="username or id")
    event_type = django_filters.ChoiceFilter(choices=AuditEvent.choices)
    team = django_filters.NumberFilter(field_name="team_id")
    share = django_filters.NumberFilter(field_name="share_id")
    job = django_filters.NumberFilter(field_name="job_id")
    queue = django_filters.NumberFilter(field_name="queue_id")
    since = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lte")

    class Meta:
        model = AuditEntry
        fields = ["actor", "event_type", "team", "share", "job", "queue", "since", "until"]

    def filter_actor(
        self, queryset: QuerySet[AuditEntry], name: str, value: str
    ) -> QuerySet[AuditEntry]:
        return user_filter(queryset, "actor", value)


class PlanFilter(django_filters.FilterSet):
    """Capacity plans: by queue, share, team, type, and state at the time of asking."""

    queue = django_filters.NumberFilter(field_name="queue_id")
    share = django_filters.NumberFilter(field_name="share_id")
    team = django_filters.NumberFilter(field_name="share__team_id")
    instance_type = django_filters.CharFilter(field_name="instance_type__name")
    state = django_filters.ChoiceFilter(choices=PlanState.choices, method="filter_state")

    class Meta:
        model = CapacityPlan
        fields = ["queue", "share", "team", "instance_type", "state"]

    def filter_state(
        self, queryset: QuerySet[CapacityPlan], name: str, value: str
    ) -> QuerySet[CapacityPlan]:
        now = timezone.now()
        if value == PlanState.UPCOMING:
            return queryset.filter(start__gt=now)
        if value == PlanState.ACTIVE:
            return queryset.filter(start__lte=now, end__gt=now)
        return queryset.filter(end__lte=now)


class WorkloadFilter(django_filters.FilterSet):
    """Workloads: by team, interruption class and recovery status."""

    team = django_filters.NumberFilter(field_name="team_id")
    interruption = django_filters.ChoiceFilter(choices=Interruption.choices)
    recovery_status = django_filters.ChoiceFilter(choices=RecoveryStatus.choices)

    class Meta:
        model = Workload
        fields = ["team", "interruption", "recovery_status"]


class Links:
    """URLs of the jobs list and the audit trail, filtered (by the filters above) to one
    group and a window: the links behind a Signals figure and behind a promise's figure."""

    def __init__(self, queue_id: int, start: datetime, stop: datetime) -> None:
        self.queue_id = queue_id
        self.start = start.isoformat()
        self.stop = stop.isoformat()

    def jobs(self, scope: dict[str, Any], moment: str, **extra: Any) -> str:
        query = {
            "queue": self.queue_id,
            **scope,
            f"{moment}_after": self.start,
            f"{moment}_before": self.stop,
        }
        query.update(extra)
        return "/jobs/?" + urlencode(query)

    def audit(self, scope: dict[str, Any], event_type: str) -> str:
        query: dict[str, Any] = {"queue": self.queue_id} if not scope else dict(scope)
        query.update({"event_type": event_type, "since": self.start, "until": self.stop})
        return "/audit/?" + urlencode(query)
