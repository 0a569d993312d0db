"""Celery tasks: thin, idempotent, taking ids. The rules live in the engine, the
transactions and locks in ``scheduler.cycle``."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from governance.models import JobQueue, WhatIf, WhatIfState
from governance.selectors.agreements import queue_promises
from governance.selectors.capacity import queue_ids
from governance.services import runs
from governance.services import whatif as whatif_services
from governance.services.exceptions import exception_close_moot, exception_expire_due
from scheduler import history, live_answers, signal_store, triggers, whatif
from scheduler.cycle.result import CycleResult
from scheduler.cycle.run import run_cycle

log = logging.getLogger(__name__)

# Only follow up on time-driven events this close; beat covers anything further out.
FOLLOW_UP_HORIZON_SECONDS = 120.0


@shared_task(ignore_result=True, acks_late=True)
def schedule_queue(queue_id: int, asked: int | None = None) -> dict[str, object]:
    """Run one cycle of a queue for request number ``asked`` (scheduler/triggers.py), unless
    a cycle that started since covered it; safe to run any number of times, on any worker."""
    if not triggers.cycle_starting(queue_id, asked):
        return {"queue": queue_id, "skipped": "a cycle started since covered this request"}
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
        "read": result.read,
    }


@shared_task(ignore_result=True)
def cycle_timer(queue_id: int) -> None:
    """A time-driven event of the queue is due (``triggers.request_cycle_at``): ask for a
    cycle as any change does, which waits its turn behind the other queues' requests."""
    triggers.request_cycle(queue_id)


def cycle_now(queue_id: int) -> CycleResult:
    """One cycle of a queue in this process, and a timer for its next time-driven event.

    The worker's task, and agents' complete-and-claim (docs/agents.md), which runs the
    cycle in the request so the freed instances are reassigned before it answers.
    """
    result = run_cycle(queue_id)
    if result.next_event_in is not None and result.next_event_in <= FOLLOW_UP_HORIZON_SECONDS:
        triggers.request_cycle_at(queue_id, result.next_event_in)
    return result


@shared_task(ignore_result=True)
def safety_net() -> None:
    """Beat's periodic pass: expire exceptions, close those whose job ended, declare lost
    runs, schedule every queue."""
    exception_expire_due()
    exception_close_moot()
    declare_lost_runs()
    for queue_id in queue_ids():
        # Coalesced with the queue's other requests; sent plain when Redis cannot count it.
        if not triggers.request_cycle(queue_id):
            schedule_queue.apply_async((queue_id,), retry=False)


def declare_lost_runs() -> int:
    """Requeue agent runs whose heartbeats stopped (1.5 intervals without a report)."""
    return len(
        runs.runs_declare_silent_lost(
            now=timezone.now(), heartbeat_seconds=settings.AGENT_HEARTBEAT_SECONDS
        )
    )


@shared_task(ignore_result=True, expires=2.0)
def slurm_sync() -> None:
    """Beat's Slurm pass (every SLURM_POLL_SECONDS): every queue run by Slurm, synchronised
    (scheduler/executors/slurm/pass_.py): reports, capacity, the cycle (handed to the pass:
    an executor never imports it), submissions, stops."""
    from scheduler.executors.slurm import pass_

    pass_.sync_all(cycle=run_cycle)


@shared_task(ignore_result=True)
def demo_activity() -> None:
    """Beat's demo tick (only scheduled when DEMO_ACTIVITY_SECONDS > 0)."""
    from governance.demo import activity

    activity.tick()


@shared_task(ignore_result=True)
def run_whatif(whatif_id: int) -> None:
    """Replay a queue's history as it was and with a proposal (docs/signals.md, "What-if"),
    reporting progress as it goes; idempotent (a finished run is left as it is)."""
    run = WhatIf.objects.select_related("queue").filter(pk=whatif_id).first()
    if run is None or run.state in (WhatIfState.DONE, WhatIfState.FAILED):
        return
    whatif_services.whatif_progress(whatif_id=run.pk, progress=1, step="exporting the history")
    try:
        now = timezone.now()
        exported = history.export(run.queue, run.window_start, run.window_stop, now=now)
        result = whatif.run(
            exported,
            run.proposal,
            progress=lambda percent, words: whatif_services.whatif_progress(
                whatif_id=run.pk, progress=percent, step=words
            ),
            promises=queue_promises(run.queue_id),
        )
        # what really happened in the window, beside the replay "as it was" (which
        # re-decides the jobs that were going at its start), from the store when the
        # window has ended (docs/signals.md#stored-answers)
        result["recorded"] = signal_store.window_signals(
            run.queue, run.window_start, run.window_stop, now=now
        )
    except whatif.ProposalError as exc:
        whatif_services.whatif_fail(whatif_id=run.pk, error=str(exc))
        return
    except Exception as exc:  # a failed replay is reported on the run, not lost in a log
        log.exception("what-if %s failed", run.pk)
        whatif_services.whatif_fail(whatif_id=run.pk, error=f"{type(exc).__name__}: {exc}")
        return
    whatif_services.whatif_finish(whatif_id=run.pk, result=result)


@shared_task(ignore_result=True)
def refresh_live_answer(
    kind: str, params: dict[str, object], token: str | None = None, version: str = ""
) -> None:
    """Recompute a page's answer of a window that ends now (``scheduler/live_answers.py``)
    and release the lock it was queued under. What each kind computes is registered by
    ``governance.selectors.scheduling``, imported here for that."""
    from governance.selectors import scheduling  # noqa: F401  (registers the kinds)

    live_answers.refresh(kind, dict(params), token, version)
