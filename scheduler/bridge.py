"""Database state to engine state, and the engine's decisions back, through the services.

One cycle of one queue (:func:`run_cycle`) happens in one transaction that holds the
queue row's lock (``SELECT ... FOR NO KEY UPDATE``) and the locks of its active jobs, so however
many workers run, one cycle per queue runs at a time, executors' reports cannot slip in
between reading a job and deciding about it, and a worker that dies mid-cycle leaves
nothing half-applied (the transaction rolls back). Every rule lives in
``scheduler.engine``; this module only translates.

Times: the engine counts in integer milliseconds of wall-clock time since the epoch, so
jobs submitted within one second still keep their order; work is in milliseconds of work
at speed 1.0. The simulated fleet runs ``DEMO_TIME_FACTOR`` times faster than the clock.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import Prefetch, Q
from django.utils import timezone

from governance import metrics
from governance.models import (
    CapacityPlan,
    DecisionRule,
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
from governance.services import hooks, insight, runs
from scheduler import engine as eng
from scheduler.engine import accounting
from scheduler.executors import simulated

MS = 1000
log = logging.getLogger(__name__)


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * MS)


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


class JobModels:
    """The queue's active jobs as model instances, fetched only for the jobs decisions
    touch (their rows are already locked by the cycle's ``SELECT ... FOR UPDATE``)."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows
        self._models: dict[str, Job] = {}

    def prefetch(self, keys: Iterable[str]) -> None:
        missing = {int(k) for k in keys if k in self.rows and k not in self._models}
        if missing:
            for job in Job.objects.filter(pk__in=missing).select_related(
                "instance_type", "share__team"
            ):
                self._models[str(job.pk)] = job

    def __getitem__(self, key: str) -> Job:
        if key not in self.rows:
            raise KeyError(key)
        if key not in self._models:
            self.prefetch([key])
        return self._models[key]

    def get(self, key: str) -> Job | None:
        return self[key] if key in self.rows else None

    def __contains__(self, key: object) -> bool:
        return key in self.rows


@dataclass
class Loaded:
    """One queue as the engine sees it, plus what is needed to apply decisions."""

    queue: JobQueue
    engine: eng.Engine
    now: datetime
    jobs: JobModels
    shares: dict[str, Share]
    type_ids: dict[str, int]
    capacity: dict[str, int]
    plans: dict[str, CapacityPlan] = field(default_factory=dict)
    """The queue's capacity plans the engine knows, by name (docs/scheduling.md#capacity-plans)."""
    disabled_pending: list[Job] = field(default_factory=list)
    completions: list[tuple[Job, datetime]] = field(default_factory=list)


def _share_config(share: Share) -> eng.ShareConfig:
    return eng.ShareConfig(
        name=share.name,
        limits={limit.instance_type.name: limit.count for limit in share.limits.all()},
        policy=eng.Policy(share.policy),
        borrow_limit=share.borrow_limit if share.borrow_limit is not None else eng.UNLIMITED,
        in_share_preemption=share.in_share_preemption,
        preemption_retries=share.preemption_retries,
    )


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


def row_job(row: dict[str, Any]) -> Job:
    """An unsaved Job carrying the row's fields (for the progress arithmetic of runs)."""
    return Job(
        **{name: value for name, value in row.items() if name not in ("type_name", "plan_name")}
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
    factor: float,
    speeds: dict[str, float],
    preferences: tuple[eng.Preference, ...],
    *,
    simulated_fleet: bool,
    may_borrow: bool,
) -> eng.Job:
    max_pending, interval, duration = (
        row["max_pending"],
        row["checkpoint_interval"],
        row["duration"],
    )
    ej = eng.Job(
        id=str(row["id"]),
        share=share_name,
        kind=row["kind"],
        priority=row["priority"],
        submitted_at=to_ms(row["submitted_at"]),
        preferences=preferences,
        max_pending=max_pending * MS if max_pending is not None else None,
        # The engine's own checkpoint arithmetic serves the simulated fleet; agents report
        # their checkpoints, so the last reported one is all that is saved.
        checkpoint_interval=interval * MS if interval and simulated_fleet else None,
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
    )
    if row["state"] == JobState.RUNNING and row["instance_type_id"] is not None:
        ej.state = eng.JobState.RUNNING
        ej.instance_type = row["type_name"]
        ej.plan = row.get("plan_name")
        ej.preference = row["preference"]
        ej.count = int(row["preferences"][row["preference"] or 0]["count"])
        ej.run_started_at = to_ms(row["run_started_at"] or now)
        if simulated_fleet:
            # The fleet runs faster than the clock the engine counts in: give the engine
            # the work done by now, from which it extrapolates at its own pace.
            speed = speeds.get(row["type_name"], 1.0)
            work = simulated.work(row_job(row), now, speed, factor)
            ej.work_done = eng.exact(round(work * MS))
            ej.progress_at = to_ms(now)
        elif row["progress_at"] is not None:
            # An executor's latest report (docs/scheduling.md, "Work and lost work").
            ej.progress_at = to_ms(row["progress_at"])
    return ej


_JOB_ROWS = (
    f"SELECT {', '.join(JOB_FIELDS)} FROM {Job._meta.db_table}"
    " WHERE queue_id = %s AND state IN (%s, %s) ORDER BY id"
)


def _job_rows(queue_id: int, *, lock: bool) -> list[dict[str, Any]]:
    """The queue's pending and running jobs as rows of ``JOB_FIELDS`` (``lock``: the
    cycle's row locks), read as the driver gives them: in a deep queue the ORM's per-value
    conversions cost more than the rest of a load. Rows whose preferences read alike
    share one parsed list (read it, never change it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _JOB_ROWS + (" FOR UPDATE" if lock else ""),
            [queue_id, JobState.PENDING, JobState.RUNNING],
        )
        fetched = cursor.fetchall()
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


def load(
    queue: JobQueue, now: datetime, *, lock: bool, verified_rule: dict[int, bool] | None = None
) -> Loaded:
    """Read one queue into a fresh engine (``lock`` takes the cycle's row locks).

    ``verified_rule`` (share id -> bool) overrides the shares' stored "borrowing requires
    verified recovery", for a preview of that change."""
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
    rows = _job_rows(queue.pk, lock=lock)
    # The plans the engine must know: those not ended yet (their start or end is still
    # to come), those active jobs name (a pending job may name one that just ended) and
    # those running jobs are on (their end stops them as plan_ended).
    named = {
        p["plan"]
        for row in rows
        for p in row["preferences"]
        if isinstance(p, dict) and p.get("plan")
    }
    on_plans = {row["plan_id"] for row in rows if row["plan_id"] is not None}
    plan_list = list(
        CapacityPlan.objects.filter(queue=queue)
        .filter(Q(end__gt=now) | Q(name__in=named) | Q(pk__in=on_plans))
        .select_related("share", "instance_type")
        .order_by("start", "id")
    )
    plan_names = {plan.pk: plan.name for plan in plan_list}
    plan_types = {plan.name: plan.instance_type.name for plan in plan_list}
    factor = simulated.time_factor(queue)
    # The simulated fleet completes runs and checkpoints by itself, whatever its speed
    # (DEMO_TIME_FACTOR may be 1); other executors report both.
    simulated_fleet = simulated.runs_itself(queue)
    itypes: dict[str, InstanceType] = {name: itype for name, (_, itype) in capacity.items()}
    for share in shares:
        for limit in share.limits.all():
            itypes.setdefault(limit.instance_type.name, limit.instance_type)
    for plan in plan_list:  # a plan's type needs no capacity of the queue
        itypes.setdefault(plan.instance_type.name, plan.instance_type)
    # Running jobs may sit on a type the queue no longer lists: it has capacity 0 now.
    known = {itype.pk for itype in itypes.values()}
    unknown = {r["instance_type_id"] for r in rows if r["instance_type_id"] is not None} - known
    for itype in InstanceType.objects.filter(pk__in=unknown):
        itypes[itype.name] = itype
    type_ids = {name: itype.pk for name, itype in itypes.items()}
    type_names = {pk: name for name, pk in type_ids.items()}
    speeds = {name: float(itype.speed) for name, itype in itypes.items()}

    usage: dict[str, int] = {}
    plan_usage: dict[str, int] = {}
    share_by_id = {s.pk: s for s in shares}
    # Shares that lend their borrowing only to verified recovery (docs/workloads.md).
    rule = verified_rule or {}
    strict = {s.pk for s in shares if rule.get(s.pk, s.borrow_requires_verified_recovery)}
    verified = verified_workloads(strict, rows)
    active_rows: dict[str, dict[str, Any]] = {}
    loaded = Loaded(
        queue=queue,
        engine=None,  # type: ignore[arg-type]
        now=now,
        jobs=JobModels(active_rows),
        shares={s.name: s for s in shares},
        type_ids=type_ids,
        capacity={name: count for name, (count, _) in capacity.items()},
        plans={plan.name: plan for plan in plan_list},
    )
    engine_jobs: list[eng.Job] = []
    disabled: list[int] = []
    # Jobs submitted alike share their preferences (``_job_rows``): made once for them.
    engine_prefs: dict[int, tuple[eng.Preference, ...]] = {}
    for row in rows:
        if row["state"] == JobState.RUNNING and row["instance_type_id"] is not None:
            name = row["type_name"] = type_names[row["instance_type_id"]]
            if simulated_fleet:
                job = row_job(row)
                done_at = simulated.finish(job, speeds[name], factor)
                if done_at is not None and done_at <= now:
                    loaded.completions.append((job, done_at))
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
        active_rows[str(row["id"])] = row
        prefs = engine_prefs.get(id(row["preferences"]))
        if prefs is None:
            prefs = tuple(_preference(p, plan_types) for p in row["preferences"])
            engine_prefs[id(row["preferences"])] = prefs
        engine_jobs.append(
            _engine_job(
                row,
                share_by_id[row["share_id"]].name,
                now,
                factor,
                speeds,
                prefs,
                simulated_fleet=simulated_fleet,
                may_borrow=may_borrow(row, strict, verified),
            )
        )
    if disabled:
        loaded.disabled_pending = list(
            Job.objects.filter(pk__in=disabled).select_related("share").order_by("id")
        )

    # Build with room for what runs now, then shrink (``play_instant``): a drop below usage
    # is the engine's capacity_lost rule, never a second implementation here.
    types = [
        eng.InstanceType(
            name=name,
            capacity=max(loaded.capacity.get(name, 0), usage.get(name, 0)),
            speed=eng.exact(speeds[name]),
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
        [_share_config(s) for s in shares],
        plans=[_plan(plan, max(plan.count, plan_usage.get(plan.name, 0))) for plan in plan_list],
        hour=eng.HOUR_MS,  # the engine counts in milliseconds here
    )
    engine.restore(engine_jobs, now=to_ms(now))
    loaded.engine = engine
    return loaded


def play_instant(loaded: Loaded, engine: eng.Engine | None = None) -> list[eng.Decision]:
    """The scheduling of the loaded instant on ``engine`` (the loaded one by default):
    the stored capacity (drops stop jobs as capacity_lost), then the cycles to a fixpoint.

    Completions were applied by ``load``; timeouts are the caller's (a cycle applies them,
    a reading of the end of the instant does not need them).
    """
    engine = engine if engine is not None else loaded.engine
    ms = to_ms(loaded.now)
    decisions: list[eng.Decision] = []
    # Plan ends first (docs/scheduling.md#capacity-plans, order within an instant), then the stored
    # capacities and plan counts, then the cycles (which start the plans due).
    decisions += engine.advance_plans(ms)
    for name in sorted(loaded.type_ids):
        decisions += engine.set_capacity(name, loaded.capacity.get(name, 0), ms)
    for plan in loaded.plans.values():
        decisions += engine.set_plan(plan.name, plan.count, ms)
    decisions += engine.schedule(ms)
    return decisions


def _versions(loaded: Loaded, *share_keys: str | None) -> dict[str, int]:
    out = {}
    for key in share_keys:
        if key is not None and key in loaded.shares:
            share = loaded.shares[key]
            out[share.name] = share.version
    return out


def _admission_text(loaded: Loaded, job: Job, d: eng.Decision) -> str:
    share = job.share
    if d.plan is not None:
        plan = loaded.plans[d.plan]
        return (
            f"Started on {d.count} x {d.instance_type} of capacity plan {d.plan} "
            f"({_choice(d.preference)}), {share.name}'s own instances until "
            f"{plan.end:%Y-%m-%d %H:%M} UTC."
        )
    limit = loaded.engine.shares[job.share.name].limits.get(d.instance_type or "", 0)
    where = f"{d.count} x {d.instance_type} (preference {(d.preference or 0) + 1})"
    if d.borrowed:
        return (
            f"Started on {where}, borrowing {d.borrowed} beyond {share.name}'s limit of "
            f"{limit} from idle capacity others lend."
        )
    return f"Started on {where} within {share.name}'s own limit of {limit}."


def _choice(index: int | None) -> str:
    words = ("first", "second", "third", "fourth", "fifth")
    position = index or 0
    return f"{words[position]} choice" if position < len(words) else f"choice {position + 1}"


def _preemption_text(loaded: Loaded, job: Job, d: eng.Decision) -> str:
    if d.rule == DecisionRule.PLAN_ENDED:
        return (
            f"Stopped: capacity plan {d.plan} ended; the job waits again and may start on "
            "its other preferences (not counted against the share's retries)."
        )
    if d.rule == DecisionRule.CAPACITY_LOST and d.plan is not None:
        plan = loaded.plans.get(d.plan)
        count = plan.count if plan is not None else "fewer"
        return (
            f"Stopped: capacity plan {d.plan} was resized to {count}, below what was "
            "running on it (not counted against the share's retries)."
        )
    if d.rule == DecisionRule.CAPACITY_LOST:
        return (
            f"Stopped: the queue's {d.instance_type} capacity dropped to "
            f"{loaded.capacity.get(d.instance_type or '', 0)}, below what was running."
        )
    by = loaded.jobs.get(d.by or "")
    by_name = by.name if by else d.by
    if d.rule == DecisionRule.RECLAIM and by is not None:
        owner = by.share
        return (
            f"Stopped: {owner.team.name}'s share {owner.name} took back its {d.instance_type} "
            f"for job {by_name}; this run was on borrowed capacity."
        )
    priority = by.priority if by else "?"
    return (
        f"Stopped: job {by_name} of the same share has a higher priority "
        f"({priority} > {job.priority}) and the share allows in-share preemption."
    )


def apply(loaded: Loaded, decisions: Iterable[eng.Decision]) -> int:
    """Apply engine decisions through the services; returns how many were applied."""
    decisions = list(decisions)
    now = loaded.now
    applied = 0
    failed = {d.job for d in decisions if d.kind == "failed"}
    loaded.jobs.prefetch({d.job for d in decisions} | {d.by for d in decisions if d.by})
    # Admissions are written in batches (``runs.runs_admit``), each flushed before the
    # next decision of another kind: the trail keeps the engine's order.
    admissions: list[runs.Admission] = []

    def flush() -> None:
        if admissions:
            runs.runs_admit(admissions=admissions, now=now)
            admissions.clear()

    for d in decisions:
        job = loaded.jobs[d.job]
        if d.kind == "admitted":
            assert d.instance_type is not None and d.count is not None
            if d.plan is not None:
                rule = DecisionRule.PLAN
            else:
                rule = DecisionRule.BORROW if d.borrowed else DecisionRule.OWN
            admissions.append(
                runs.Admission(
                    job=job,
                    instance_type_id=loaded.type_ids[d.instance_type],
                    instance_type_name=d.instance_type,
                    count=d.count,
                    preference=d.preference or 0,
                    borrowed=d.borrowed or 0,
                    rule=rule,
                    plan_id=loaded.plans[d.plan].pk if d.plan is not None else None,
                    plan_name=d.plan,
                    share_versions=_versions(loaded, job.share.name),
                    explanation=_admission_text(loaded, job, d),
                )
            )
            applied += 1
            continue
        if d.kind not in ("preempted", "timed_out"):
            continue  # "failed" is applied with its "preempted"
        flush()
        if d.kind == "preempted":
            lost = float(d.lost_work or 0) / MS
            engine_job = loaded.engine.job(d.job)
            by = loaded.jobs.get(d.by) if d.by else None
            runs.run_preempt(
                job=job,
                reason=d.rule or "",
                by_job=by,
                lost_work=lost,
                saved_work=float(engine_job.last_checkpoint) / MS,
                fail=d.job in failed,
                # Lost capacity and plan ends are nobody's doing (docs/scheduling.md).
                counts_against_retries=d.rule
                not in (DecisionRule.CAPACITY_LOST, DecisionRule.PLAN_ENDED),
                share_versions=_versions(loaded, job.share.name, by.share.name if by else None),
                now=now,
                explanation=_preemption_text(loaded, job, d),
            )
        else:  # "timed_out"
            wait = (now - job.submitted_at).total_seconds()
            if d.rule == "deadline":
                explanation = (
                    "Timed out: no preference can finish by its deadline "
                    f"{job.deadline:%Y-%m-%d %H:%M} UTC any more (waited {wait:.0f} s)."
                    if job.deadline is not None
                    else "Timed out: no preference can finish by its deadline any more."
                )
            else:
                explanation = (
                    f"Timed out: waited {wait:.0f} s without starting, past its max pending "
                    f"time of {job.max_pending} s."
                )
            runs.run_time_out(
                job=job, now=now, explanation=explanation, reason=d.rule or "max_pending"
            )
        applied += 1
    flush()
    return applied


@dataclass
class CycleResult:
    queue_id: int
    admitted: int = 0
    preempted: int = 0
    timed_out: int = 0
    completed: int = 0
    next_event_in: float | None = None
    """Seconds until the next time-driven event (a simulated completion, a timeout)."""
    now: datetime | None = None
    levels: list[insight.Level] = field(default_factory=list)
    """What the cycle leaves running, for the usage history (``record_usage``)."""


def run_cycle(
    queue_id: int,
    *,
    now: datetime | None = None,
    before: Callable[[], None] | None = None,
    within: Callable[[Loaded, list[eng.Decision]], None] | None = None,
    record_usage: bool = True,
) -> CycleResult:
    """Schedule one queue at ``now``: completions, capacity drops, cycles, timeouts.

    An executor hands the cycle what it has to write in the same transaction:
    ``before`` runs once the queue is locked, before it is read (the reports of what the
    executor saw: a completion it reports frees capacity for this very cycle); ``within``
    once the decisions are applied, with the queue as loaded (its rows still locked) and
    the decisions (what the executor must have committed with the admissions before it
    starts them: the slurm executor's submission rows), so it reads nothing twice.
    Without ``record_usage`` the caller records the usage history (``record_usage``)
    once it has done what must come first (the slurm executor's submissions).

    Idempotent: running it again at once finds nothing left to decide.
    """
    # The completions this cycle applies are decided on by the cycle itself: they need
    # no further cycle (``hooks.cycle_running``).
    with transaction.atomic(), hooks.cycle_running(queue_id):
        # FOR NO KEY UPDATE: one cycle per queue still, but the key-share lock a new
        # job's reference to the queue takes (at commit) does not wait for the cycle.
        queue = JobQueue.objects.select_for_update(no_key=True).get(pk=queue_id)
        if before is not None:
            before()
        started = time.perf_counter()
        now = now or timezone.now()
        loaded = load(queue, now, lock=True)
        result = CycleResult(queue_id=queue_id)
        for job, done_at in sorted(loaded.completions, key=lambda item: (item[1], item[0].pk)):
            runs.run_complete(actor=None, job_id=job.pk, run=job.run, now=done_at)
            result.completed += 1
        decisions = play_instant(loaded)
        decisions += loaded.engine.timeouts(to_ms(now))
        apply(loaded, decisions)
        if within is not None:
            within(loaded, decisions)
        result.now, result.levels = now, usage_levels(loaded)
        if record_usage:
            _record_usage(result)
        result.admitted = sum(1 for d in decisions if d.kind == "admitted")
        result.preempted = sum(1 for d in decisions if d.kind == "preempted")
        result.timed_out = sum(1 for d in decisions if d.kind == "timed_out")
        result.next_event_in = _next_event_in(loaded, decisions, now)
    # Counted once committed (operators' /metrics: governance/metrics.py).
    admitted = Counter(
        DecisionRule.BORROW if d.borrowed else DecisionRule.OWN
        for d in decisions
        if d.kind == "admitted"
    )
    metrics.count_decisions(
        {str(k): n for k, n in admitted.items()},
        Counter(d.rule or "" for d in decisions if d.kind == "preempted"),
    )
    metrics.observe_cycle(time.perf_counter() - started)
    return result


def record_usage(result: CycleResult) -> None:
    """Record what a cycle run without ``record_usage`` left running, in the usage
    history; the history row's own lock keeps it right (a cycle recorded meanwhile for a
    later moment makes this one skip, never credit an interval twice)."""
    with transaction.atomic():
        _record_usage(result)


def _record_usage(result: CycleResult) -> None:
    assert result.now is not None
    try:
        # A measurement: it runs in a savepoint of its own and never stops a cycle.
        insight.usage_record(queue_id=result.queue_id, levels=result.levels, now=result.now)
    except DatabaseError:
        log.exception("usage history of queue %s not recorded", result.queue_id)


def usage_levels(loaded: Loaded) -> list[insight.Level]:
    """Own, borrowed, lent and idle per share and type as the engine holds them now, for
    the usage rollups: the one accounting function over the engine's usage, with lent
    capacity attributed to lenders in share name order, as the usage bars do
    (``selectors.capacity.queues_usage``), so the history and the bars agree."""
    shares = {name: share.pk for name, share in loaded.shares.items()}
    configs = loaded.engine.shares
    levels = []
    for name in sorted(loaded.type_ids):
        engine_account = loaded.engine.type_account(name)
        account = accounting.account_type(
            engine_account.capacity,
            [
                accounting.ShareOnType(
                    key=row.key,
                    policy=configs[row.key].policy.value,
                    limit=row.limit if row.has_limit else None,
                    usage=row.usage,
                )
                for row in sorted(engine_account.shares, key=lambda r: r.key)
            ],
        )
        for row in account.shares:
            levels.append(
                insight.Level(
                    share_id=shares[row.key],
                    instance_type_id=loaded.type_ids[name],
                    own=row.own,
                    borrowed=row.borrowed,
                    lent=row.lent,
                    idle=row.idle,
                )
            )
    return levels


def _next_event_in(loaded: Loaded, decisions: list[eng.Decision], now: datetime) -> float | None:
    """Seconds until this queue next needs a cycle without any outside change."""
    moments: list[float] = []
    deadline = loaded.engine.next_deadline()
    if deadline is not None:
        moments.append(deadline / MS - now.timestamp())
    factor = simulated.time_factor(loaded.queue)
    if simulated.runs_itself(loaded.queue):
        for ej in loaded.engine.jobs():
            # the fleet completes runs by their duration only (without one, a run goes
            # on until stopped, whatever its expected run time)
            if ej.state is eng.JobState.RUNNING and ej.duration is not None:
                finish = loaded.engine.finish_time(ej)
                if finish is not None:
                    # The engine extrapolates at the clock's pace; the fleet runs faster.
                    remaining_ms = (finish - to_ms(now)) / factor
                    moments.append(remaining_ms / MS)
    if not moments:
        return None
    return max(0.0, min(moments))


__all__ = [
    "CycleResult",
    "Loaded",
    "apply",
    "load",
    "play_instant",
    "record_usage",
    "row_job",
    "run_cycle",
    "to_ms",
]
