"""Reads of jobs and their timelines for the API and the pages (no N+1)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from functools import cache
from typing import Any

from django.db.models import Prefetch, QuerySet

from governance import prepared
from governance.models import (
    CapacityPlan,
    InstanceType,
    Job,
    JobEvent,
    JobQueue,
    Share,
    SlurmRun,
    Team,
)
from governance.models.capacity import Executor
from governance.roles import AnyUser
from governance.selectors.rows import built, columns, table, width
from governance.services.errors import NotFound, ValidationFailed
from governance.services.limits import valid_id
from scheduler.engine import constraints as engine_constraints
from scheduler.engine.work import ceil as ceil_work


def jobs() -> QuerySet[Job]:
    """Every job, newest first, with what its listing shows loaded in the same query."""
    return Job.objects.select_related(
        "queue", "share", "share__team", "submitter", "instance_type", "plan", "workload"
    )


def jobs_with_share(ids: Collection[int], *, lock: bool = False) -> list[Job]:
    """Jobs by id, in id order, as ``Job.objects.select_related("share__team",
    "instance_type", "queue")`` gives them; ``lock``: their rows locked, the jobs' alone
    (``FOR UPDATE OF``). The cycle reads through this the jobs it admits and completes, a
    few at a time, tens of times a second: one statement whose text is built once
    (``selectors.rows``), where the ORM compiled the four joins anew each time."""
    if not ids:
        return []
    with prepared.cursor() as cursor:
        cursor.execute(_with_share_sql(lock), [sorted(ids)])
        rows = cursor.fetchall()
    share_at = width(Job)
    team_at = share_at + width(Share)
    queue_at = team_at + width(Team)
    type_at = queue_at + width(JobQueue)
    found = []
    for row in rows:
        job: Job = built(Job, row[:share_at])
        share: Share = built(Share, row[share_at:team_at])
        share.team = built(Team, row[team_at:queue_at])
        job.share = share
        job.queue = built(JobQueue, row[queue_at:type_at])
        job.instance_type = None if row[type_at] is None else built(InstanceType, row[type_at:])
        found.append(job)
    return found


@cache
def _with_share_sql(lock: bool) -> str:
    return (
        f"SELECT {columns(Job, 'j')}, {columns(Share, 's')}, {columns(Team, 't')}, "
        f"{columns(JobQueue, 'q')}, {columns(InstanceType, 'it')} "
        f"FROM {table(Job)} j JOIN {table(Share)} s ON s.id = j.share_id"
        f" JOIN {table(Team)} t ON t.id = s.team_id"
        f" JOIN {table(JobQueue)} q ON q.id = j.queue_id"
        f" LEFT JOIN {table(InstanceType)} it ON it.id = j.instance_type_id"
        " WHERE j.id = ANY(%s) ORDER BY j.id" + (" FOR UPDATE OF j" if lock else "")
    )


def job_with_events(job_id: int, *, with_decisions: bool = False) -> Job | None:
    """One job with its events (oldest first) and its Slurm jobs prefetched;
    ``with_decisions``: its decision and the decision it was resubmitted for joined in
    (the job page shows both: two queries fewer). Read unordered (one row by its key):
    an ordering makes Django match it against each of the join's hundred-odd columns,
    a tenth of the live status partial's time."""
    found = jobs()
    if with_decisions:
        found = found.select_related("decision", "resubmitted_for")
    rows = list(
        found.prefetch_related(
            Prefetch("events", queryset=JobEvent.objects.order_by("at", "id")),
            Prefetch("slurm_runs", queryset=SlurmRun.objects.order_by("run", "id")),
        )
        .filter(pk=job_id)
        .order_by()[:1]
    )
    return rows[0] if rows else None


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


def expected_costs(
    preferences: Sequence[dict[str, Any]],
    duration: int | float | None,
    types: dict[str, tuple[float, Decimal]],
    plans: dict[str, tuple[str, Decimal]],
    overhead: int = 0,
) -> list[tuple[int | None, Fraction | int | None]]:
    """Per resolved preference: expected run time in seconds and cost (None when
    unknown), as the scheduler judges eligibility (docs/scheduling.md#deadline-and-budget):
    ``duration`` is the work left (the whole duration before the first start),
    ``overhead`` the restart overhead once the job has been preempted."""
    out: list[tuple[int | None, Fraction | int | None]] = []
    for pref in preferences:
        if pref.get("plan"):
            type_name, price = plans.get(pref["plan"], ("", Decimal(0)))
        else:
            type_name = pref.get("instance_type") or ""
            price = types.get(type_name, (1.0, Decimal(0)))[1]
        speed = types.get(type_name, (1.0, Decimal(0)))[0]
        if duration is not None:
            left = max(Fraction(0), Fraction(str(duration)))
            runtime = overhead + ceil_work(left / Fraction(str(speed)))
        elif pref.get("runtime") is not None:
            runtime = overhead + int(pref["runtime"])
        else:
            out.append((None, None))
            continue
        cost = engine_constraints.expected_cost(
            int(pref.get("count") or 1),
            Fraction(price),
            runtime,
            engine_constraints.HOUR_SECONDS,
        )
        out.append((runtime, cost))
    return out


def choice_outlook(job: Job, now: datetime) -> list[dict[str, Any]]:
    """Per preference of a job with a deadline or a budget: its expected run time and
    cost if it started now, until when it can still meet the deadline, and whether it
    is eligible now (``eligible``, ``over_budget``, ``deadline_unreachable``, or
    ``unknown`` when no run time is known: always eligible). Empty for other jobs."""
    if job.deadline is None and job.max_cost is None:
        return []
    prefs = list(job.preferences)
    plan_names = [p["plan"] for p in prefs if p.get("plan")]
    plan_rows = {
        plan.name: (plan.instance_type.name, plan.hourly_price)
        for plan in CapacityPlan.objects.filter(
            share_id=job.share_id, name__in=plan_names
        ).select_related("instance_type")
    }
    names = {p.get("instance_type") for p in prefs} | {t for t, _ in plan_rows.values()}
    types = {
        t.name: (t.speed, t.hourly_price)
        for t in InstanceType.objects.filter(name__in=[n for n in names if n])
    }
    left = None if job.duration is None else max(0.0, job.duration - job.checkpoint_work)
    overhead = job.restart_overhead if job.preemptions else 0
    out = []
    for index, (runtime, cost) in enumerate(
        expected_costs(prefs, left, types, plan_rows, overhead)
    ):
        until = None
        state = "unknown" if runtime is None else "eligible"
        if runtime is not None:
            if job.deadline is not None:
                until = job.deadline - timedelta(seconds=runtime)
            if job.max_cost is not None and cost is not None and cost > Fraction(job.max_cost):
                state = "over_budget"
            elif until is not None and now > until:
                state = "deadline_unreachable"
        out.append(
            {
                "preference": index,
                "runtime": runtime,
                "cost": float(cost) if cost is not None else None,
                "until": until,
                "state": state,
            }
        )
    return out
