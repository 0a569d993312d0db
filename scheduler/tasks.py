"""Celery tasks: thin, idempotent, taking ids. The rules live in the engine, the
transactions and locks in ``scheduler.bridge``."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from governance.models import Job, JobQueue, JobState
from governance.models.capacity import Executor
from governance.services import runs
from governance.services.exceptions import exception_expire_due
from scheduler import bridge, triggers

log = logging.getLogger(__name__)

# Only follow up on time-driven events this close; beat covers anything further out.
FOLLOW_UP_HORIZON_SECONDS = 120.0


@shared_task(ignore_result=True, acks_late=True)
def schedule_queue(queue_id: int) -> dict[str, object]:
    """Run one cycle of a queue; safe to run any number of times, on any worker."""
    triggers.cycle_started(queue_id)
    triggers.timer_fired(queue_id)
    try:
        result = cycle_now(queue_id)
    except JobQueue.DoesNotExist:
        return {"queue": queue_id, "skipped": "no such queue"}
    return {
        "queue": queue_id,
        "admitted": result.admitted,
        "preempted": result.preempted,
        "completed": result.completed,
        "timed_out": result.timed_out,
    }


def cycle_now(queue_id: int) -> bridge.CycleResult:
    """One cycle of a queue in this process, and a timer for its next time-driven event.

    The worker's task, and agents' complete-and-claim (docs/agents.md), which runs the
    cycle in the request so the freed instances are reassigned before it answers.
    """
    result = bridge.run_cycle(queue_id)
    if result.next_event_in is not None and result.next_event_in <= FOLLOW_UP_HORIZON_SECONDS:
        triggers.request_cycle_at(queue_id, result.next_event_in)
    return result


@shared_task(ignore_result=True)
def safety_net() -> None:
    """Beat's periodic pass: expire exceptions, declare lost runs, schedule every queue."""
    exception_expire_due()
    declare_lost_runs()
    for queue_id in JobQueue.objects.values_list("id", flat=True):
        schedule_queue.apply_async((queue_id,), retry=False)


def declare_lost_runs() -> int:
    """Requeue agent runs whose heartbeats stopped (1.5 intervals without a report)."""
    interval = settings.AGENT_HEARTBEAT_SECONDS
    now = timezone.now()
    cutoff = now - timedelta(seconds=1.5 * interval)
    lost = list(
        Job.objects.filter(
            queue__executor=Executor.AGENT,
            state=JobState.RUNNING,
            last_heartbeat_at__lt=cutoff,
        )
        .exclude(agent="")
        .values_list("id", "agent", "last_heartbeat_at")
    )
    for job_id, agent, last in lost:
        silent = (now - last).total_seconds() if last is not None else 0.0
        runs.run_declare_lost(
            job_id=job_id,
            now=now,
            explanation=(
                f"Agent {agent} sent no report for {silent:.0f} s (heartbeat interval "
                f"{interval:g} s): the run is declared lost and the job requeued."
            ),
        )
    return len(lost)


@shared_task(ignore_result=True)
def demo_activity() -> None:
    """Beat's demo tick (only scheduled when DEMO_ACTIVITY_SECONDS > 0)."""
    from scheduler.executors import simulated

    simulated.tick()
