"""Reads of priority exceptions for the API and the pages (no N+1)."""

from __future__ import annotations

from django.db.models import QuerySet

from governance.models import PriorityException


def exceptions() -> QuerySet[PriorityException]:
    """Every exception, newest first, with its people and target loaded."""
    return PriorityException.objects.select_related(
        "team", "job", "share", "requester", "decided_by"
    ).order_by("-created_at", "-id")
