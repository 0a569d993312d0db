"""Reads of decisions for the API and the pages (docs/workloads.md#decisions), no N+1."""

from __future__ import annotations

from datetime import datetime

from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.utils import timezone

from governance.models import Decision, DecisionState


def decisions() -> QuerySet[Decision]:
    """Every decision, newest first, with its job, team and people loaded."""
    return Decision.objects.select_related(
        "team", "job__share", "job__workload", "decided_by", "resubmitted_job"
    ).order_by("-opened_at", "-id")


# What an open decision's row shows (``open_decisions``).
OPEN_ROW_FIELDS = (
    "state",
    "due_at",
    "team__name",
    "job__name",
    "job__workload__name",
)


def open_decisions(
    *, team_id: int | None = None, now: datetime | None = None
) -> QuerySet[Decision]:
    """Open decisions, the soonest due first (the overdue ones lead), each with
    ``is_overdue``: with only what their rows show (``decisions/_rows.html``: the job's
    name and workload, the team's name, when due). A team's few dozen open decisions
    loaded with every column of their job, share, workload and deciders cost its page
    more than all its other reads; any other field read on them is a query each."""
    late = ExpressionWrapper(Q(due_at__lte=now or timezone.now()), output_field=BooleanField())
    found = (
        Decision.objects.select_related("team", "job__workload")
        .only(*OPEN_ROW_FIELDS)
        .filter(state=DecisionState.OPEN)
        .annotate(is_overdue=late)
    )
    if team_id is not None:
        found = found.filter(team_id=team_id)
    return found.order_by("due_at", "id")


def overdue(decision: Decision, now: datetime | None = None) -> bool:
    """An open decision past its due time."""
    return decision.state == DecisionState.OPEN and decision.due_at <= (now or timezone.now())
