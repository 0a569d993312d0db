"""Reads of workloads for the API and the pages (docs/workloads.md)."""

from __future__ import annotations

from django.db.models import QuerySet

from governance.models import Job, RecoveryChange, Workload


def workloads() -> QuerySet[Workload]:
    return Workload.objects.select_related("team")


def of_team(team_id: int) -> list[Workload]:
    return list(workloads().filter(team_id=team_id).order_by("name"))


def history(workload_id: int) -> list[RecoveryChange]:
    """The workload's recovery changes, newest first, with their evidence jobs."""
    return list(
        RecoveryChange.objects.filter(workload_id=workload_id)
        .select_related("evidence_job", "actor")
        .order_by("-at", "-id")
    )


def recent_jobs(workload_id: int, limit: int = 20) -> list[Job]:
    """The workload's newest jobs, for its page."""
    return list(
        Job.objects.filter(workload_id=workload_id)
        .select_related("share")
        .order_by("-submitted_at", "-id")[:limit]
    )
