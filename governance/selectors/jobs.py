"""Reads of jobs and their timelines for the API and the pages (no N+1)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from governance.models import Job, JobEvent


def jobs() -> QuerySet[Job]:
    """Every job, newest first, with what its listing shows loaded in the same query."""
    return Job.objects.select_related("queue", "share", "share__team", "submitter", "instance_type")


def job_with_events(job_id: int) -> Job | None:
    """One job with its events (oldest first) prefetched."""
    return (
        jobs()
        .prefetch_related(Prefetch("events", queryset=JobEvent.objects.order_by("at", "id")))
        .filter(pk=job_id)
        .first()
    )
