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


def choices_for_shares(share_ids: list[int]) -> list[tuple[int, str]]:
    """(id, label) of the workloads of the teams of ``share_ids``: what the job form offers."""
    rows = (
        workloads().filter(team__shares__pk__in=share_ids).distinct().order_by("team__name", "name")
    )
    return [
        (w.pk, f"{w.team.name}: {w.name} ({w.interruption}, recovery {w.recovery_status})")
        for w in rows
    ]
