"""The read phase: one queue from the database into a fresh engine (``load``), as a
``QueueSnapshot``.

A cycle reads under the queue's lock and its active jobs' row locks (``lock=True``);
the readings (``scheduler/readings.py``) read without locks and apply nothing. Every
rule lives in ``scheduler.engine``; this module only translates. What only the executor
knows, how far a run it runs by itself has got and when it finishes, it asks the
queue's executor (``scheduler.executors.base.Executor``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from django.db import connection
from django.db.models import Prefetch, Q

from governance import prepared
from governance.models import (
    CapacityPlan,
    InstanceType,
    Job,
    JobQueue,
    JobState,
    QueueCapacity,
    RecoveryStatus,
    Share,
    ShareLimit,
    Workload,
)
from scheduler import engine as eng
from scheduler.cycle.snapshot import MS, ActiveJobs, QueueSnapshot, row_job, to_ms
from scheduler.executors.base import Executor
from scheduler.executors.registry import executor_for

# Job columns the engine needs: reading these as rows, not model instances with their
# related share, team and type, keeps a cycle of 15,000 active jobs well under a second.
JOB_FIELDS = (
    "id",
    "state",
    "share_id",
    "kind",
    "priority",
    "submitted_at",
    "preferences",
    "max_pending",
    "checkpoint_interval",
    "duration",
    "restart_overhead",
    "preemptions",
    "counted_preemptions",
    "recomputed",
    "started_at",
    "checkpoint_work",
    "work_done",
    "instance_type_id",
    "plan_id",
    "preference",
    "run_started_at",
    "progress_at",
    "run",
    "may_borrow",
    "preemptible",
    "deadline",
    "max_cost",
    "workload_id",
)

_JOB_ROWS = (
    f"SELECT {', '.join(JOB_FIELDS)} FROM {Job._meta.db_table}"
    " WHERE queue_id = %s AND state IN (%s, %s) ORDER BY id"
)
# By id alone, the queue checked on the rows: with ``queue_id = $1`` in the WHERE, the
# plan PostgreSQL keeps for this prepared statement may read every job the queue ever had
# through its index and filter them by id (it did whenever the statistics thought the queue
# small: 3 ms a cycle at 7,000 jobs, growing with the queue's history).
_CHANGED_ROWS = (
    f"SELECT queue_id, {', '.join(JOB_FIELDS)} FROM {Job._meta.db_table}"
    " WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE"
)


def _job_rows(queue_id: int, *, lock: bool) -> list[dict[str, Any]]:
    """The queue's pending and running jobs as rows of ``JOB_FIELDS`` (``lock``: the
    cycle's row locks), read as the driver gives them: in a deep queue the ORM's per-value
    conversions cost more than the rest of a load."""
    with connection.cursor() as cursor:
        cursor.execute(
            _JOB_ROWS + (" FOR UPDATE" if lock else ""),
            [queue_id, JobState.PENDING, JobState.RUNNING],
        )
        return _rows(cursor.fetchall())


def changed_rows(queue_id: int, ids: Iterable[int]) -> list[dict[str, Any]]:
    """The rows of jobs ``ids`` still in the queue, whatever their state, locked as the
    cycle's full read locks its rows (the incremental cycle, ``scheduler.cycle.kept``)."""
    with prepared.cursor() as cursor:
        cursor.execute(_CHANGED_ROWS, [sorted(ids)])
        return _rows(row[1:] for row in cursor.fetchall() if row[0] == queue_id)


def _rows(fetched: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Fetched values as rows of ``JOB_FIELDS``. Rows whose preferences read alike share
    one parsed list (read it, never change it)."""
    parsed: dict[str, Any] = {}
    rows = []
    for values in fetched:
        row = dict(zip(JOB_FIELDS, values, strict=True))
        text = row["preferences"]
        if isinstance(text, str):  # jsonb comes as its text
            if text not in parsed:
                parsed[text] = json.loads(text)
            row["preferences"] = parsed[text]
        rows.append(row)
    return rows


def verified_workloads(strict: set[int], rows: Iterable[dict[str, Any]]) -> set[int]:
    """The verified workloads among those the rows of ``strict`` shares (ids of shares
    that require verified recovery to borrow) name."""
    if not strict:
        return set()
    named = {r["workload_id"] for r in rows if r["share_id"] in strict and r["workload_id"]}
    if not named:
        return set()
    return set(
        Workload.objects.filter(pk__in=named, recovery_status=RecoveryStatus.VERIFIED).values_list(
            "pk", flat=True
        )
    )


def may_borrow(row: dict[str, Any], strict: set[int], verified: set[int]) -> bool:
    """Whether the engine lets the job borrow: its own ``may_borrow``, and, in a share that
    requires verified recovery (``strict``), a workload whose recovery is verified."""
    if not row["may_borrow"]:
        return False
    if row["share_id"] in strict:
        return row["workload_id"] in verified
    return True


def _share_config(share: Share) -> eng.ShareConfig:
    return eng.ShareConfig(
        name=share.name,
        limits={limit.instance_type.name: limit.count for limit in share.limits.all()},
        policy=eng.Policy(share.policy),
        borrow_limit=share.borrow_limit if share.borrow_limit is not None else eng.UNLIMITED,
        in_share_preemption=share.in_share_preemption,
        preemption_retries=share.preemption_retries,
    )


def _preference(p: dict[str, Any], plan_types: dict[str, str]) -> eng.Preference:
    """A stored preference as the engine's: a type, or a plan (with the plan's type)."""
    runtime = p.get("runtime")
    runtime_ms = int(runtime) * MS if runtime is not None else None
    if p.get("plan"):
        return eng.Preference(
            instance_type=plan_types[p["plan"]],
            count=int(p["count"]),
            plan=p["plan"],
            runtime=runtime_ms,
        )
    return eng.Preference(
        instance_type=p["instance_type"], count=int(p["count"]), runtime=runtime_ms
    )


def _plan(plan: CapacityPlan, count: int) -> eng.Plan:
    return eng.Plan(
        name=plan.name,
        instance_type=plan.instance_type.name,
        count=count,
        share=plan.share.name,
        start=to_ms(plan.start),
        end=to_ms(plan.end),
        hourly_price=float(plan.hourly_price),
    )


def _engine_job(
    row: dict[str, Any],
    share_name: str,
    now: datetime,
    executor: Executor,
    speeds: dict[str, float],
    preferences: tuple[eng.Preference, ...],
    *,
    may_borrow: bool,
) -> eng.Job:
    max_pending, interval, duration = (
        row["max_pending"],
        row["checkpoint_interval"],
        row["duration"],
    )
    runs_itself = executor.runs_itself
    ej = eng.Job(
        id=str(row["id"]),
        share=share_name,
        kind=row["kind"],
        priority=row["priority"],
        submitted_at=to_ms(row["submitted_at"]),
        preferences=preferences,
        max_pending=max_pending * MS if max_pending is not None else None,
        # The engine's own checkpoint arithmetic serves an executor that runs the jobs
        # itself; others report their checkpoints, so the last reported one is all that
        # is saved.
        checkpoint_interval=interval * MS if interval and runs_itself else None,
        restart_overhead=0,
        duration=duration * MS if duration is not None else None,
        preemptions=row["preemptions"],
        counted_preemptions=row["counted_preemptions"],
        recomputed=eng.exact(round(row["recomputed"] * MS)),
        started_at=to_ms(row["started_at"]) if row["started_at"] else None,
        last_checkpoint=eng.exact(round(row["checkpoint_work"] * MS)),
        work_done=eng.exact(round(row["work_done"] * MS)),
        may_borrow=may_borrow,
        preemptible=row["preemptible"],
        deadline=to_ms(row["deadline"]) if row["deadline"] is not None else None,
        max_cost=eng.exact(Fraction(row["max_cost"])) if row["max_cost"] is not None else None,
        # Ties broken by id, so a job re-read alone (``scheduler.cycle.kept``) sits where
        # a full read puts it (``Engine.restore(keep_seq=True)``).
        seq=row["id"],
    )
    if row["state"] == JobState.RUNNING and row["instance_type_id"] is not None:
        ej.state = eng.JobState.RUNNING
        ej.instance_type = row["type_name"]
        ej.plan = row.get("plan_name")
        ej.preference = row["preference"]
        ej.count = int(row["preferences"][row["preference"] or 0]["count"])
        ej.run_started_at = to_ms(row["run_started_at"] or now)
        if runs_itself:
            # The executor may run faster than the clock the engine counts in: give the
            # engine the work done by now, from which it extrapolates at its own pace.
            work = executor.work(row_job(row), now, speeds.get(row["type_name"], 1.0))
            ej.work_done = eng.exact(round(work * MS))
            ej.progress_at = to_ms(now)
        elif row["progress_at"] is not None:
            # An executor's latest report (docs/scheduling.md, "Work and lost work").
            ej.progress_at = to_ms(row["progress_at"])
    return ej


@dataclass
class Setting:
    """What the queue's jobs are read against: its capacity, shares, plans and types."""

    capacity: dict[str, tuple[int, InstanceType]]
    shares: list[Share]
    plans: list[CapacityPlan]
    types: dict[str, InstanceType] = field(default_factory=dict)


@dataclass
class RowFacts:
    """What the setting read depends on in the active rows: the plans their preferences
    name, the plans and the types their runs are on."""

    named: set[str] = field(default_factory=set)
    on_plans: set[int] = field(default_factory=set)
    on_types: set[int] = field(default_factory=set)


def row_facts(rows: Iterable[dict[str, Any]]) -> RowFacts:
    facts = RowFacts()
    for row in rows:
        facts.named.update(plan_names(row))
        if row["plan_id"] is not None:
            facts.on_plans.add(row["plan_id"])
        if row["instance_type_id"] is not None:
            facts.on_types.add(row["instance_type_id"])
    return facts


def plan_names(row: dict[str, Any]) -> set[str]:
    """The plans a row's preferences name."""
    return {p["plan"] for p in row["preferences"] if isinstance(p, dict) and p.get("plan")}


def read_setting(queue: JobQueue, now: datetime, facts: RowFacts) -> Setting:
    """The queue's capacity, shares, the plans the engine must know and every type the
    engine counts on: those of its capacity, of its shares' limits, of its plans, and
    those running jobs sit on (a type the queue no longer lists has capacity 0 now)."""
    capacity = {
        row.instance_type.name: (row.count, row.instance_type)
        for row in QueueCapacity.objects.filter(queue=queue).select_related("instance_type")
    }
    shares = list(
        Share.objects.filter(queue=queue)
        .select_related("team")
        .prefetch_related(
            Prefetch("limits", queryset=ShareLimit.objects.select_related("instance_type"))
        )
        .order_by("id")
    )
    # The plans the engine must know: those not ended yet (their start or end is still
    # to come), those active jobs name (a pending job may name one that just ended) and
    # those running jobs are on (their end stops them as plan_ended).
    plans = list(
        CapacityPlan.objects.filter(queue=queue)
        .filter(Q(end__gt=now) | Q(name__in=facts.named) | Q(pk__in=facts.on_plans))
        .select_related("share", "instance_type")
        .order_by("start", "id")
    )
    setting = Setting(capacity, shares, plans)
    types = setting.types
    types.update({name: itype for name, (_, itype) in capacity.items()})
    for share in shares:
        for limit in share.limits.all():
            types.setdefault(limit.instance_type.name, limit.instance_type)
    for plan in plans:  # a plan's type needs no capacity of the queue
        types.setdefault(plan.instance_type.name, plan.instance_type)
    unknown = facts.on_types - {itype.pk for itype in types.values()}
    if unknown:
        for itype in InstanceType.objects.filter(pk__in=unknown):
            types[itype.name] = itype
    return setting


@dataclass
class Read:
    """A full read: the snapshot, and what a cycle keeps to read only changes next time
    (``scheduler.cycle.kept``): the setting, every active row (those of disabled shares
    too), the shares that lend only to verified recovery and the verified workloads."""

    snapshot: QueueSnapshot
    setting: Setting
    rows: list[dict[str, Any]]
    strict: set[int]
    verified: set[int]


def load(
    queue: JobQueue,
    now: datetime,
    *,
    lock: bool,
    executor: Executor | None = None,
    verified_rule: dict[int, bool] | None = None,
) -> QueueSnapshot:
    """Read one queue into a fresh engine (``lock`` takes the cycle's row locks).

    ``executor``: the queue's (``executor_for``) unless given. ``verified_rule`` (share id
    -> bool) overrides the shares' stored "borrowing requires verified recovery", for a
    preview of that change."""
    return read_all(queue, now, lock=lock, executor=executor, verified_rule=verified_rule).snapshot


def read_all(
    queue: JobQueue,
    now: datetime,
    *,
    lock: bool,
    executor: Executor | None = None,
    verified_rule: dict[int, bool] | None = None,
) -> Read:
    """``load``, with what a cycle keeps of it."""
    executor = executor if executor is not None else executor_for(queue)
    rows = _job_rows(queue.pk, lock=lock)
    setting = read_setting(queue, now, row_facts(rows))
    snapshot = new_snapshot(queue, now, setting)
    strict = strict_shares(snapshot, verified_rule or {})
    verified = verified_workloads(strict, rows)
    context = RowContext(snapshot, strict, verified)
    jobs, usage, plan_usage = _jobs(snapshot, rows, executor, context)
    # Build with room for what runs now, then shrink (``decide.play_instant``): a drop
    # below usage is the engine's capacity_lost rule, never a second implementation here.
    itypes = setting.types
    types = [
        eng.InstanceType(
            name=name,
            capacity=max(snapshot.capacity.get(name, 0), usage.get(name, 0)),
            speed=eng.exact(snapshot.speeds[name]),
            # The stored flag decides (docs/scheduling.md, "Max pending time"), never the name.
            accelerated=itypes[name].accelerated,
            hourly_price=float(itypes[name].hourly_price),
        )
        for name in sorted(itypes)
    ]
    # Plans too are built with room for what runs on them, then set to their stored
    # count by ``play_instant`` (a drop is the engine's capacity_lost within the plan).
    engine = eng.Engine(
        types,
        [_share_config(s) for s in setting.shares],
        plans=[
            _plan(plan, max(plan.count, plan_usage.get(plan.name, 0))) for plan in setting.plans
        ],
        hour=eng.HOUR_MS,  # the engine counts in milliseconds here
    )
    engine.restore(jobs, now=to_ms(now), keep_seq=True)
    snapshot.engine = engine
    return Read(snapshot, setting, rows, strict, verified)


def new_snapshot(queue: JobQueue, now: datetime, setting: Setting) -> QueueSnapshot:
    """A snapshot of the setting with no job yet (and no engine: the caller's)."""
    itypes = setting.types
    return QueueSnapshot(
        queue=queue,
        engine=None,  # type: ignore[arg-type]  # the caller's, built from what the jobs hold
        now=now,
        jobs=ActiveJobs({}),
        shares={s.name: s for s in setting.shares},
        type_ids={name: itype.pk for name, itype in itypes.items()},
        speeds={name: float(itype.speed) for name, itype in itypes.items()},
        capacity={name: count for name, (count, _) in setting.capacity.items()},
        plans={plan.name: plan for plan in setting.plans},
    )


def strict_shares(snapshot: QueueSnapshot, verified_rule: dict[int, bool]) -> set[int]:
    """Shares that lend their borrowing only to verified recovery (docs/workloads.md)."""
    return {
        s.pk
        for s in snapshot.shares.values()
        if verified_rule.get(s.pk, s.borrow_requires_verified_recovery)
    }


class RowContext:
    """What turning an active row into an engine job needs besides the row: the
    snapshot's names for ids, and who may borrow."""

    def __init__(self, snapshot: QueueSnapshot, strict: set[int], verified: set[int]) -> None:
        self.share_by_id = {s.pk: s for s in snapshot.shares.values()}
        self.type_names = {pk: name for name, pk in snapshot.type_ids.items()}
        self.plan_names = {plan.pk: plan.name for plan in snapshot.plans.values()}
        self.plan_types = {plan.name: plan.instance_type.name for plan in snapshot.plans.values()}
        self.strict = strict
        self.verified = verified
        # Jobs submitted alike share their preferences (``_rows``): made once for them.
        self._prefs: dict[int, tuple[eng.Preference, ...]] = {}

    def preferences(self, row: dict[str, Any]) -> tuple[eng.Preference, ...]:
        prefs = self._prefs.get(id(row["preferences"]))
        if prefs is None:
            prefs = tuple(_preference(p, self.plan_types) for p in row["preferences"])
            self._prefs[id(row["preferences"])] = prefs
        return prefs

    def engine_job(
        self, row: dict[str, Any], now: datetime, executor: Executor, speeds: dict[str, float]
    ) -> eng.Job:
        """The engine's job of an active row whose running names are filled in
        (``type_name``, ``plan_name``)."""
        return _engine_job(
            row,
            self.share_by_id[row["share_id"]].name,
            now,
            executor,
            speeds,
            self.preferences(row),
            may_borrow=may_borrow(row, self.strict, self.verified),
        )


def _jobs(
    snapshot: QueueSnapshot,
    rows: list[dict[str, Any]],
    executor: Executor,
    context: RowContext,
) -> tuple[list[eng.Job], dict[str, int], dict[str, int]]:
    """The active rows as engine jobs, filling ``snapshot.jobs``, its completions (runs
    the executor finished by itself by now) and its disabled pending jobs; with what runs
    on each type and on each plan."""
    now = snapshot.now
    share_by_id = context.share_by_id
    type_names = context.type_names
    plan_names = context.plan_names
    usage: dict[str, int] = {}
    plan_usage: dict[str, int] = {}
    active = snapshot.jobs.rows
    speeds = snapshot.speeds
    runs_itself = executor.runs_itself
    engine_jobs: list[eng.Job] = []
    disabled: list[int] = []
    for row in rows:
        if row["state"] == JobState.RUNNING and row["instance_type_id"] is not None:
            name = row["type_name"] = type_names[row["instance_type_id"]]
            if runs_itself:
                job = row_job(row)
                done_at = executor.finish(job, speeds[name])
                if done_at is not None and done_at <= now:
                    snapshot.completions.append((job, done_at))
                    continue
            count = int(row["preferences"][row["preference"] or 0]["count"])
            if row["plan_id"] is not None:
                # A run on a plan holds the plan's instances, not the queue's.
                plan_name = row["plan_name"] = plan_names[row["plan_id"]]
                plan_usage[plan_name] = plan_usage.get(plan_name, 0) + count
            else:
                usage[name] = usage.get(name, 0) + count
        elif not share_by_id[row["share_id"]].enabled:
            disabled.append(row["id"])
            continue
        active[str(row["id"])] = row
        engine_jobs.append(context.engine_job(row, now, executor, speeds))
    if disabled:
        snapshot.disabled_pending = list(
            Job.objects.filter(pk__in=disabled).select_related("share").order_by("id")
        )
    return engine_jobs, usage, plan_usage
