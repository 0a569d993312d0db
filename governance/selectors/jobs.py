"""Reads of jobs and their timelines for the API and the pages (no N+1)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from governance.models import Job, JobEvent, JobQueue, SlurmRun
from governance.models.capacity import Executor
from governance.roles import AnyUser
from governance.services.errors import NotFound, ValidationFailed
from governance.services.limits import valid_id


def jobs() -> QuerySet[Job]:
    """Every job, newest first, with what its listing shows loaded in the same query."""
    return Job.objects.select_related(
        "queue", "share", "share__team", "submitter", "instance_type", "plan"
    )


def job_with_events(job_id: int) -> Job | None:
    """One job with its events (oldest first) and its Slurm jobs prefetched."""
    return (
        jobs()
        .prefetch_related(
            Prefetch("events", queryset=JobEvent.objects.order_by("at", "id")),
            Prefetch("slurm_runs", queryset=SlurmRun.objects.order_by("run", "id")),
        )
        .filter(pk=job_id)
        .first()
    )


def agent_queue(queue_id: int) -> JobQueue:
    """The queue an agent serves; it must be run by agents."""
    queue = JobQueue.objects.filter(pk=queue_id).first() if valid_id(queue_id) else None
    if queue is None:
        raise NotFound({"detail": [f"no queue {queue_id}"]})
    if queue.executor != Executor.AGENT:
        raise ValidationFailed(
            {
                "queue": [
                    f"queue {queue.name} is run by the {queue.executor} executor, not by agents"
                ]
            }
        )
    return queue


def stop_orders(
    queue: JobQueue, *, agent: str | None = None, claimed_by: AnyUser | None = None
) -> QuerySet[Job]:
    """Runs of ``queue`` the scheduler preempted that their agent must still stop
    (``claimed_by``: only those these credentials claimed)."""
    jobs = Job.objects.filter(queue=queue, stop_requested_run__isnull=False)
    if claimed_by is not None:
        jobs = jobs.filter(claimed_by_id=claimed_by.pk)
    if agent:
        jobs = jobs.filter(agent=agent)
    return jobs.order_by("id")


def slurm_runs(job: Job, limit: int = 10) -> list[SlurmRun]:
    """The Slurm jobs that carried the job's latest runs, newest first (Slurm queues)."""
    if job.queue.executor != Executor.SLURM:
        return []
    return list(SlurmRun.objects.filter(job=job).order_by("-run", "-id")[:limit])
