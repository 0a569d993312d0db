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


def open_decisions(
    *, team_id: int | None = None, now: datetime | None = None
) -> QuerySet[Decision]:
    """Open decisions, the soonest due first (the overdue ones lead), each with
    ``is_overdue``."""
    late = ExpressionWrapper(Q(due_at__lte=now or timezone.now()), output_field=BooleanField())
    found = decisions().filter(state=DecisionState.OPEN).annotate(is_overdue=late)
    if team_id is not None:
        found = found.filter(team_id=team_id)
    return found.order_by("due_at", "id")


def overdue(decision: Decision, now: datetime | None = None) -> bool:
    """An open decision past its due time."""
    return decision.state == DecisionState.OPEN and decision.due_at <= (now or timezone.now())
