"""The incremental read: each worker process keeps, per queue, the engine its last
committed cycle of the queue left, and the next cycle reads only the jobs that changed
since (docs/architecture.md#a-cycle).

What changed: a trigger on the job table logs every write to an active job in the
writer's transaction (``governance.models.CycleChange``); the cycle takes its queue's
log under the queue's lock (``DELETE ... RETURNING``), so a change committed later is
found by the next cycle, never lost between two. Whatever else a decision depends on
(capacity, shares and their limits, plans, types, teams, verified workloads) is read
again each cycle: it is small, and any difference from what the kept engine was built
from means a full read.

Several workers: each cycle stores its number, a token and the jobs it took off the
log in ``governance.models.CycleLog``, so a worker whose kept engine is a few cycles
old (other processes ran the queue since) catches up on the jobs those cycles saw
change, instead of reading everything again.

An executor that runs jobs itself (the simulated fleet) moves every running job's
progress with the clock, not its row: each cycle gives the engine the work each of its
running jobs has done by now, as an executor's progress report does
(``Engine.report_progress``), from the row kept (when the run ends is worked out once
per row); the pending ones are kept as they are.

A full read instead, whenever anything is in doubt: nothing kept (a new worker, or the
last cycle rolled back: an engine is kept only once its cycle commits), the kept cycle
no longer in the log as kept (more than ``KEPT_CYCLES`` cycles ago, or another history
under its number), a change logged in full, a kept job a decision touches that changed
since it was read (``snapshot.StaleRead``: the phases are rolled back and run again),
or the switch ``SCHEDULER_INCREMENTAL_CYCLE`` off.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings

from governance import prepared
from governance.models import (
    CapacityPlan,
    CycleChange,
    CycleLog,
    InstanceType,
    Job,
    JobQueue,
    JobState,
    QueueCapacity,
    Share,
    ShareLimit,
    Team,
    Workload,
)
from governance.models import RecoveryStatus as Recovery
from governance.services.insight import Level
from scheduler import engine as eng
from scheduler.cycle import read
from scheduler.cycle.snapshot import MS, ActiveJobs, QueueSnapshot, StaleRead, row_job, to_ms
from scheduler.executors.base import Executor

ACTIVE = (JobState.PENDING, JobState.RUNNING)


def enabled() -> bool:
    """Whether cycles keep their engine (``SCHEDULER_INCREMENTAL_CYCLE``)."""
    return bool(getattr(settings, "SCHEDULER_INCREMENTAL_CYCLE", True))


@dataclass
class Kept:
    """One queue's state at the end of a committed cycle, in this process."""

    seq: int
    """The cycle's number in its queue's ``CycleLog``."""
    token: int
    """The cycle's token there: another one under ``seq`` means another history."""
    snapshot: QueueSnapshot
    """The engine as the cycle's decisions left it, and the rows it holds."""
    fingerprint: str
    """The setting's fingerprint (``_FINGERPRINT``), taken before the engine's setting was
    read."""
    plans: dict[int, tuple[str, datetime]]
    """Every plan of the queue then: id -> (name, end), to tell which the engine must know."""
    strict: set[int]
    verified: set[int]
    disabled: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Active rows not in the engine: pending jobs of disabled shares, and runs the
    executor finished by itself (the cycle completes them)."""
    dirty: set[int] = field(default_factory=set)
    """Jobs to read again whether logged or not: those the cycle decided about (the
    engine played its decisions; the stored rows say what was written), and running
    rows without a run start (read as the cycle's instant)."""
    named: Counter[str] = field(default_factory=Counter)
    on_plans: Counter[int] = field(default_factory=Counter)
    on_types: Counter[int] = field(default_factory=Counter)
    workloads: Counter[tuple[int, int]] = field(default_factory=Counter)
    """(share id, workload id) of the active rows naming a workload."""
    recorded: tuple[list[Level], datetime] | None = None
    """The usage levels this process last recorded for the queue, and when: a cycle
    that leaves the same levels within the same minute need not record
    (``usage.unchanged``). None: not known (another process may have recorded since)."""

    def count(self, row: dict[str, Any], sign: int = 1) -> None:
        """Add (or, ``sign`` -1, take away) what a row holds of ``read.RowFacts``."""
        _tally(self.named, read.plan_names(row), sign)
        _tally(self.on_plans, _present(row["plan_id"]), sign)
        _tally(self.on_types, _present(row["instance_type_id"]), sign)
        _tally(self.workloads, _workload(row), sign)

    def facts(self) -> read.RowFacts:
        return read.RowFacts(set(self.named), set(self.on_plans), set(self.on_types))


def _tally(counter: Counter[Any], keys: Iterable[Any], sign: int) -> None:
    for key in keys:
        counter[key] += sign
        if not counter[key]:
            del counter[key]


def _present(value: Any) -> tuple[Any, ...]:
    return (value,) if value else ()


def _workload(row: dict[str, Any]) -> tuple[tuple[int, int], ...]:
    return ((row["share_id"], row["workload_id"]),) if row["workload_id"] else ()


_KEPT: dict[int, Kept] = {}


def take(queue_id: int) -> Kept | None:
    """This process's kept state of the queue, removed: a cycle that does not commit
    leaves nothing kept (``keep`` runs only on commit)."""
    return _KEPT.pop(queue_id, None)


def keep(queue_id: int, kept: Kept) -> None:
    """Keep a committed cycle's state (``transaction.on_commit``)."""
    _KEPT[queue_id] = kept


def forget_all() -> None:
    """Drop every kept state (tests, and a worker that wants a clean start)."""
    _KEPT.clear()


_CAPACITY, _SHARE, _TEAM = QueueCapacity._meta.db_table, Share._meta.db_table, Team._meta.db_table
_LIMIT, _PLAN, _TYPE = (
    ShareLimit._meta.db_table,
    CapacityPlan._meta.db_table,
    InstanceType._meta.db_table,
)
# The setting's fingerprint: a digest of every stored row the setting is read from (the
# queue's capacity, shares and their teams, limits and plans, and every instance type:
# each row whole, so any edit shows), and the queue's plans (id -> name, end). Taken
# with the cycle's log (``advance``), before a full read: a change committed between the
# two makes the next cycle's digest differ.
_FINGERPRINT = f"""
SELECT md5(concat_ws('#',
    (SELECT string_agg(c::text, '|' ORDER BY c.id) FROM {_CAPACITY} c WHERE c.queue_id = %(q)s),
    (SELECT string_agg(s::text || t::text, '|' ORDER BY s.id)
        FROM {_SHARE} s JOIN {_TEAM} t ON t.id = s.team_id WHERE s.queue_id = %(q)s),
    (SELECT string_agg(l::text, '|' ORDER BY l.id)
        FROM {_LIMIT} l JOIN {_SHARE} s ON s.id = l.share_id WHERE s.queue_id = %(q)s),
    (SELECT string_agg(p::text, '|' ORDER BY p.id) FROM {_PLAN} p WHERE p.queue_id = %(q)s),
    (SELECT string_agg(it::text, '|' ORDER BY it.id) FROM {_TYPE} it)
)),
(SELECT array_agg(ARRAY[p.id::text, p.name] ORDER BY p.id) FROM {_PLAN} p WHERE p.queue_id = %(q)s),
(SELECT array_agg(p."end" ORDER BY p.id) FROM {_PLAN} p WHERE p.queue_id = %(q)s)
"""


def _setting(
    digest: str, names: list[list[str]] | None, ends: list[datetime] | None
) -> tuple[str, dict[int, tuple[str, datetime]]]:
    """The fingerprint's columns as (digest, plans by id)."""
    return digest, {
        int(pk): (name, end) for (pk, name), end in zip(names or [], ends or [], strict=True)
    }


KEPT_CYCLES = 100
"""How many of a queue's latest cycles ``CycleLog`` holds: a kept engine more cycles
behind than this reads in full."""

_LOG, _CHANGES = CycleLog._meta.db_table, CycleChange._meta.db_table
# One round trip, under the queue's lock: this cycle's number and token stored with the
# jobs it takes off the change log, the log's oldest rows pruned, and what the cycles
# after the kept one (``%(kept)s``) took (the statement's reads see the rows as they were
# before it: the new row is not among them, the pruned ones still are).
_ADVANCE = f"""
WITH last AS (
    SELECT seq, token FROM {_LOG} WHERE queue_id = %(q)s ORDER BY seq DESC LIMIT 1
), taken AS (
    DELETE FROM {_CHANGES} WHERE queue_id = %(q)s RETURNING job_id
), added AS (
    INSERT INTO {_LOG} (queue_id, seq, token, jobs, whole)
    SELECT %(q)s, COALESCE((SELECT seq FROM last), 0) + 1, %(token)s,
        COALESCE(array_agg(DISTINCT job_id) FILTER (WHERE job_id IS NOT NULL), '{{}}'),
        COALESCE(bool_or(job_id IS NULL), false)
    FROM taken
    RETURNING seq, jobs, whole
), pruned AS (
    DELETE FROM {_LOG} WHERE queue_id = %(q)s
        AND seq <= COALESCE((SELECT seq FROM last), 0) + 1 - %(keep)s
)
SELECT added.seq, added.jobs, added.whole,
    (SELECT token FROM {_LOG} WHERE queue_id = %(q)s AND seq = %(kept)s),
    (SELECT count(*) FROM {_LOG} WHERE queue_id = %(q)s AND seq > %(kept)s),
    (SELECT COALESCE(bool_or(whole), false) FROM {_LOG} WHERE queue_id = %(q)s AND seq > %(kept)s),
    (SELECT array_agg(DISTINCT job) FROM {_LOG}, unnest(jobs) AS job
        WHERE queue_id = %(q)s AND seq > %(kept)s),
    setting.*
FROM added, ({_FINGERPRINT}) AS setting
"""


@dataclass
class Advance:
    """What the cycle learned storing its place in the queue's ``CycleLog``."""

    seq: int
    token: int
    changed: set[int]
    """The jobs to read again: those logged as changed since the kept engine's cycle
    (by this cycle's take and by the other processes' cycles in between)."""
    whole: bool
    """Something was logged as changed in full since: read in full."""
    behind: int | None
    """How many other processes' cycles ran since the kept one; None: the kept one is not
    in the log as kept (no kept engine, pruned, or another cycle under its number)."""
    setting: tuple[str, dict[int, tuple[str, datetime]]]
    """The setting's fingerprint now (``_FINGERPRINT``), and the queue's plans."""


def advance(queue_id: int, found: Kept | None) -> Advance:
    """Number this cycle and take its queue's change log (under the queue's lock, before
    either read, so a change committed after it stays in the log for the next cycle);
    with ``found``, the kept engine, also what the cycles since it saw change. One round
    trip: a cycle that changes nothing makes few."""
    token = secrets.randbits(62) + 1
    kept_seq = found.seq if found is not None else -1
    with prepared.cursor() as cursor:
        cursor.execute(
            _ADVANCE, {"q": queue_id, "token": token, "keep": KEPT_CYCLES, "kept": kept_seq}
        )
        found_row = cursor.fetchone()
    seq, taken, whole, kept_token, between, whole_between, jobs_between = found_row[:7]
    changed = set(taken) | set(jobs_between or ())
    behind = None
    if found is not None and kept_token == found.token and between == seq - 1 - found.seq:
        behind = between
    return Advance(seq, token, changed, whole or whole_between, behind, _setting(*found_row[7:]))


def full_read(
    queue: JobQueue,
    now: datetime,
    executor: Executor,
    setting: tuple[str, dict[int, tuple[str, datetime]]],
) -> tuple[read.Read, Kept]:
    """A full read of the cycle (rows locked), and what to keep of it (``setting``: the
    fingerprint ``advance`` took before it)."""
    digest, plans = setting
    found = read.read_all(queue, now, lock=True, executor=executor)
    kept = Kept(
        seq=0,
        token=0,
        snapshot=found.snapshot,
        fingerprint=digest,
        plans=plans,
        strict=found.strict,
        verified=found.verified,
    )
    rows = found.snapshot.jobs.rows
    for row in found.rows:
        kept.count(row)
        key = str(row["id"])
        if key not in rows:
            kept.disabled[key] = row
        elif row["state"] == JobState.RUNNING and row["run_started_at"] is None:
            kept.dirty.add(row["id"])
    return found, kept


def refresh(
    kept: Kept, queue: JobQueue, now: datetime, executor: Executor, log: Advance
) -> QueueSnapshot | None:
    """The kept engine brought to ``now``: the jobs ``log`` says changed (and the dirty
    ones) forgotten and restored from their rows, read and locked now (and, on an
    executor that runs them itself, the other running jobs from their kept rows, at
    their progress by now, but for those it finished by now, read and locked too).
    None: the setting
    changed, or a row does not fit the kept engine; read in full (``kept`` is spent
    either way)."""
    ids = log.changed | kept.dirty
    kept.dirty = set()
    engine = kept.snapshot.engine
    rows = kept.snapshot.jobs.rows
    # An executor that runs the jobs itself moved their progress with the clock, not
    # their rows: its other running jobs get their progress by now (below), but for
    # those it finished by now, read and locked like the changed ones (the cycle
    # completes them: a cancel committed since must be seen, as a full read sees it).
    again: list[dict[str, Any]] = []
    if executor.runs_itself:
        speeds = kept.snapshot.speeds
        for job in list(engine.running_jobs()):
            row = rows.get(job.id)
            if row is None or row["state"] != JobState.RUNNING or row["id"] in ids:
                continue
            done_at = _run(row, executor, speeds[row["type_name"]])[1]
            if done_at is not None and done_at <= now:
                ids.add(row["id"])
            else:
                again.append(row)
    fresh = read.changed_rows(queue.pk, ids) if ids else []
    for job_id in ids:
        key = str(job_id)
        old = rows.pop(key, None) or kept.disabled.pop(key, None)
        if old is not None:
            kept.count(old, -1)
            engine.forget(key)
    active = [row for row in fresh if row["state"] in ACTIVE]
    for row in active:
        kept.count(row)
    if not _same_setting(kept, log.setting, now):
        return None
    if kept.strict and _verified(kept) != kept.verified:
        return None
    was = kept.snapshot
    snapshot = QueueSnapshot(
        queue=queue,
        engine=engine,
        now=now,
        jobs=ActiveJobs(rows, verify=_Verify(queue.pk, rows, ids)),
        shares=was.shares,
        type_ids=was.type_ids,
        speeds=was.speeds,
        capacity=was.capacity,
        plans=was.plans,
    )
    context = read.RowContext(snapshot, kept.strict, kept.verified)
    try:
        for row in active:
            _restore(kept, context, row, snapshot, executor)
        at = to_ms(now)
        for row in again:
            _progress(engine, row, now, at, executor, snapshot.speeds)
    except (KeyError, ValueError):  # a row the kept setting does not know: read in full
        return None
    kept.snapshot = snapshot
    return snapshot


def _run(row: dict[str, Any], executor: Executor, speed: float) -> tuple[Job, datetime | None]:
    """A kept running row's model (``row_job``, for the progress arithmetic only) and when
    the executor that runs the jobs itself finishes its run. Worked out once per row, and
    kept in it: they depend on the row, the type's speed and the executor's pace, which
    the kept engine's setting fixes (a change of either reads in full), and a cycle
    otherwise built the model three times per running job (a quarter of a busy worker's
    CPU with a hundred running)."""
    run: tuple[Job, datetime | None] | None = row.get(RUN)
    if run is None:
        model = row_job(row)
        run = row[RUN] = (model, executor.finish(model, speed))
    return run


# The key of a kept row under which ``_run`` keeps its answer (no column's name).
RUN = "~run"


def _progress(
    engine: eng.Engine,
    row: dict[str, Any],
    now: datetime,
    at: int,
    executor: Executor,
    speeds: dict[str, float],
) -> None:
    """A kept running job unchanged since its row was read, at its progress by ``now``:
    what restoring it from the row would give the engine (``read._engine_job``: the work
    the executor has done by now, counted from now), as a progress report."""
    speed = speeds.get(row["type_name"], 1.0)
    work = executor.work(_run(row, executor, speed)[0], now, speed)
    engine.report_progress(str(row["id"]), at, eng.exact(round(work * MS)))


def _same_setting(
    kept: Kept, setting: tuple[str, dict[int, tuple[str, datetime]]], now: datetime
) -> bool:
    """Whether a full read now would read the setting the kept engine was built from:
    the same stored rows (the fingerprint), the same plans known (``read.read_setting``:
    not ended, or named or run on by an active job) and the same types (the setting's
    own, and those active jobs ran on)."""
    digest, plans = setting
    if digest != kept.fingerprint:
        return False
    was = kept.snapshot
    facts = kept.facts()
    known = {
        pk
        for pk, (name, end) in plans.items()
        if end > now or name in facts.named or pk in facts.on_plans
    }
    if known != {plan.pk for plan in was.plans.values()}:
        return False
    own = {plan.instance_type_id for plan in was.plans.values()}
    own.update(limit.instance_type_id for s in was.shares.values() for limit in s.limits.all())
    own.update(was.type_ids[name] for name in was.capacity)
    return set(was.type_ids.values()) == own | facts.on_types


def _verified(kept: Kept) -> set[int]:
    """The verified workloads among those the strict shares' active rows name, now."""
    named = {workload for share, workload in kept.workloads if share in kept.strict}
    if not named:
        return set()
    return set(
        Workload.objects.filter(pk__in=named, recovery_status=Recovery.VERIFIED).values_list(
            "pk", flat=True
        )
    )


def _restore(
    kept: Kept,
    context: read.RowContext,
    row: dict[str, Any],
    snapshot: QueueSnapshot,
    executor: Executor,
) -> None:
    """One active row into the kept engine, as ``read._jobs`` reads it in a full read
    (a run the executor finished by itself goes to the snapshot's completions)."""
    key = str(row["id"])
    if row["state"] == JobState.RUNNING and row["instance_type_id"] is not None:
        name = row["type_name"] = context.type_names[row["instance_type_id"]]
        if executor.runs_itself:
            done_at = _run(row, executor, snapshot.speeds[name])[1]
            if done_at is not None and done_at <= snapshot.now:
                snapshot.completions.append((row_job(row), done_at))
                kept.disabled[key] = row
                return
        if row["plan_id"] is not None:
            row["plan_name"] = context.plan_names[row["plan_id"]]
        if row["run_started_at"] is None:
            kept.dirty.add(row["id"])
    elif not context.share_by_id[row["share_id"]].enabled:
        kept.disabled[key] = row
        return
    kept.snapshot.jobs.rows[key] = row
    job: eng.Job = context.engine_job(row, snapshot.now, executor, snapshot.speeds)
    kept.snapshot.engine.submit(job, keep_seq=True)


class _Verify:
    """``ActiveJobs.verify`` of a cycle on a kept engine: the rows a decision touches
    that this cycle has not read yet are locked now and must still be as kept."""

    def __init__(self, queue_id: int, rows: dict[str, dict[str, Any]], locked: set[int]) -> None:
        self.queue_id = queue_id
        self.rows = rows
        self.locked = set(locked)

    def __call__(self, ids: set[int]) -> None:
        todo = ids - self.locked
        if not todo:
            return
        fresh = {row["id"]: row for row in read.changed_rows(self.queue_id, todo)}
        for job_id in todo:
            now_row, was = fresh.get(job_id), self.rows.get(str(job_id))
            if now_row is None or was is None:
                raise StaleRead(job_id)
            if any(now_row[name] != was[name] for name in read.JOB_FIELDS):
                raise StaleRead(job_id)
        self.locked |= todo
