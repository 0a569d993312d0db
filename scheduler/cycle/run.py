"""``run_cycle``: one scheduling cycle of one queue, phase by phase, calling the queue's
executor between them (docs/architecture.md#a-cycle).

One cycle happens in one transaction that holds the queue row's lock (``SELECT ... FOR
NO KEY UPDATE``) and the locks of its active jobs, so however many workers run, one cycle per
queue runs at a time, executors' reports cannot slip in between reading a job and
deciding about it, and a worker that dies mid-cycle leaves nothing half-applied (the
transaction rolls back).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from governance import metrics, prepared
from governance.models import DecisionRule, JobQueue
from governance.selectors.rows import built, columns, table
from governance.services import hooks
from scheduler import engine as eng
from scheduler.cycle import apply, decide, kept, usage
from scheduler.cycle.result import CycleResult
from scheduler.cycle.snapshot import MS, QueueSnapshot, StaleRead, to_ms
from scheduler.executors.base import Executor
from scheduler.executors.registry import executor_for


def run_cycle(
    queue_id: int, *, now: datetime | None = None, executor: Executor | None = None
) -> CycleResult:
    """Schedule one queue at ``now``: completions, capacity drops, cycles, timeouts.

    ``executor``: the queue's (``executor_for``) unless given (the Slurm pass hands the
    one that carries what it read of Slurm). Idempotent: running it again at once finds
    nothing left to decide.
    """
    # The completions this cycle applies are decided on by the cycle itself: they need
    # no further cycle (``hooks.cycle_running``).
    with transaction.atomic(), hooks.cycle_running(queue_id):
        queue = _locked_queue(queue_id)
        executor = executor if executor is not None else executor_for(queue)
        # 1. the executor's reports, before anything is read
        executor.before_cycle(queue)
        started = time.perf_counter()
        now = now or timezone.now()
        # What this process kept of the last cycle of the queue it ran, and what changed
        # since: in jobs only, the kept engine catches up on them (``scheduler.cycle.kept``).
        found = kept.take(queue_id)
        log = kept.advance(queue_id, found)
        usable, why = _usable(found, log)
        result = CycleResult(queue_id=queue_id, now=now, read=why)
        if usable is None:
            snapshot, decisions, next_kept = _phases(queue, now, executor, result, None, log)
        else:
            result.caught_up = log.behind or 0
            if log.behind:  # another process's cycle may have recorded the usage since
                usable.recorded = None
            try:
                with transaction.atomic():  # a savepoint: a stale read rolls back to here
                    snapshot, decisions, next_kept = _phases(
                        queue, now, executor, result, usable, log
                    )
            except StaleRead:
                result = CycleResult(queue_id=queue_id, now=now, read="full: stale read")
                snapshot, decisions, next_kept = _phases(queue, now, executor, result, None, log)
        kinds = Counter(d.kind for d in decisions)
        result.admitted = kinds[eng.DecisionKind.ADMITTED]
        result.preempted = kinds[eng.DecisionKind.PREEMPTED]
        result.timed_out = kinds[eng.DecisionKind.TIMED_OUT]
        result.next_event_in = _next_event_in(snapshot, executor)
        if kept.enabled() and next_kept is not None:
            next_kept.seq, next_kept.token = log.seq, log.token
            next_kept.dirty |= {int(d.job) for d in decisions}
            transaction.on_commit(partial(kept.keep, queue_id, next_kept))
    _count(decisions, time.perf_counter() - started)
    # 7. committed: the executor tells the outside world
    executor.after_commit(result)
    return result


# FOR NO KEY UPDATE: one cycle per queue still, but the key-share lock a new job's
# reference to the queue takes (at commit) does not wait for the cycle. The same statement
# marks the transaction as the queue's cycle, so its audit entries join the queue's cycle
# chain and the seal of a big batch at its commit holds no head a submission needs
# (migration 0038). One statement prepared once per connection (``governance.prepared``),
# where the ORM compiled the same locking read at every cycle.
_LOCK_QUEUE = (
    f"SELECT {columns(JobQueue, 'q')}, "
    "pg_catalog.set_config('governance.audit_lane', 'cycle', true) "
    f"FROM {table(JobQueue)} q WHERE q.id = %s FOR NO KEY UPDATE"
)


def _locked_queue(queue_id: int) -> JobQueue:
    """The queue, its row locked for the cycle; ``JobQueue.DoesNotExist`` when it is gone."""
    with prepared.cursor() as cursor:
        cursor.execute(_LOCK_QUEUE, [queue_id])
        row = cursor.fetchone()
    if row is None:
        raise JobQueue.DoesNotExist(f"No queue with id {queue_id}.")
    queue: JobQueue = built(JobQueue, row[:-1])
    return queue


def _usable(found: kept.Kept | None, log: kept.Advance) -> tuple[kept.Kept | None, str]:
    """The kept state if the cycle may build on it; else None and why it reads in full."""
    if not kept.enabled():
        return None, "full: switched off (SCHEDULER_INCREMENTAL_CYCLE)"
    if found is None:
        return None, "full: nothing kept"
    if log.behind is None:
        return None, "full: the kept cycle is no longer in the log"
    if log.whole:
        return None, "full: logged as changed in full"
    return found, ""


def _phases(
    queue: JobQueue,
    now: datetime,
    executor: Executor,
    result: CycleResult,
    usable: kept.Kept | None,
    log: kept.Advance,
) -> tuple[QueueSnapshot, list[eng.Decision], kept.Kept | None]:
    """Read (the kept engine brought up to date, or in full), decide, apply, usage: the
    phases a stale read runs again. Returns what to keep if the cycle commits."""
    snapshot = None
    if usable is not None:
        snapshot = kept.refresh(usable, queue, now, executor, log)
    if snapshot is not None:
        next_kept: kept.Kept | None = usable
        result.read = "kept"
    else:
        # 2. read: the queue as the engine sees it (runs the executor finished found)
        found, next_kept = kept.full_read(queue, now, executor, log.setting)
        snapshot = found.snapshot
        if usable is not None:
            result.read = "full: the setting changed"
    result.completed = apply.complete_finished(snapshot)
    # 3. decide: the engine plays the instant; 4. apply: through services/runs.py
    decisions = decide.decide(snapshot)
    apply.apply(snapshot, decisions)
    # 5. what the executor commits with the decisions
    executor.within_cycle(snapshot, decisions)
    # 6. usage: what the cycle leaves running, for the usage history
    result.levels = usage.levels(snapshot)
    recorded = next_kept.recorded if next_kept is not None else None
    if executor.defers_usage and next_kept is not None:
        next_kept.recorded = None  # recorded after the commit, by the executor: not known
    if (
        not executor.defers_usage
        and not usage.unchanged(recorded, result.levels, now)
        and usage.record(queue.pk, result.levels, now)
        and next_kept is not None
    ):
        next_kept.recorded = (result.levels, now)
    return snapshot, decisions, next_kept


def _count(decisions: list[eng.Decision], seconds: float) -> None:
    """The committed cycle in the operators' /metrics (governance/metrics.py)."""
    admitted = Counter(
        DecisionRule.BORROW if d.borrowed else DecisionRule.OWN
        for d in decisions
        if d.kind == eng.DecisionKind.ADMITTED
    )
    metrics.observe_cycle(
        seconds,
        admitted={str(k): n for k, n in admitted.items()},
        preempted=Counter(d.rule or "" for d in decisions if d.kind == eng.DecisionKind.PREEMPTED),
    )


def _next_event_in(snapshot: QueueSnapshot, executor: Executor) -> float | None:
    """Seconds until this queue next needs a cycle without any outside change."""
    now = snapshot.now
    moments: list[float] = []
    deadline = snapshot.engine.next_deadline()
    if deadline is not None:
        moments.append(deadline / MS - now.timestamp())
    if executor.runs_itself:
        for ej in snapshot.engine.running_jobs():
            # the fleet completes runs by their duration only (without one, a run goes
            # on until stopped, whatever its expected run time)
            if ej.duration is not None:
                finish = snapshot.engine.finish_time(ej)
                if finish is not None:
                    # The engine extrapolates at the clock's pace; the fleet may run faster.
                    remaining_ms = (finish - to_ms(now)) / executor.time_factor
                    moments.append(remaining_ms / MS)
    if not moments:
        return None
    return max(0.0, min(moments))
