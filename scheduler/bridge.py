"""Database state to engine state, and the engine's decisions back, through the services.

One cycle of one queue (:func:`run_cycle`) happens in one transaction that holds the
queue row's lock (``SELECT ... FOR UPDATE``) and the locks of its active jobs, so however
many workers run, one cycle per queue runs at a time, executors' reports cannot slip in
between reading a job and deciding about it, and a worker that dies mid-cycle leaves
nothing half-applied (the transaction rolls back). Every rule lives in
``scheduler.engine``; this module only translates.

Times: the engine counts in integer milliseconds of wall-clock time since the epoch, so
jobs submitted within one second still keep their order; work is in milliseconds of work
at speed 1.0. The simulated fleet runs ``DEMO_TIME_FACTOR`` times faster than the clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from governance.models import InstanceType, Job, JobQueue, JobState, QueueCapacity, Share
from governance.models.capacity import Executor
from governance.services import hooks, runs
from scheduler import engine as eng

MS = 1000
DISABLED_REASON = "share_disabled"


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * MS)


def time_factor(queue: JobQueue) -> float:
    """Simulated seconds per real second: the demo fleet runs faster than the clock."""
    return float(settings.DEMO_TIME_FACTOR) if queue.executor == Executor.SIMULATED else 1.0


# Job columns the engine needs: reading these as rows, not model instances with their
# related share, team and type, keeps a cycle of 15,000 active jobs well under a second.
JOB_FIELDS = (
    "id",
    "state",
    "share_id",
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
    "preference",
    "run_started_at",
    "run",
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


def _row_job(row: dict[str, Any]) -> Job:
    """An unsaved Job carrying the row's fields (for the progress arithmetic of runs)."""
    return Job(**{name: value for name, value in row.items() if name != "type_name"})


def _engine_job(
    row: dict[str, Any],
    share_name: str,
    now: datetime,
    factor: float,
    speeds: dict[str, float],
    *,
    simulated: bool,
) -> eng.Job:
    preferences = tuple(
        eng.Preference(instance_type=p["instance_type"], count=int(p["count"]))
        for p in row["preferences"]
    )
    max_pending, interval, duration = (
        row["max_pending"],
        row["checkpoint_interval"],
        row["duration"],
    )
    ej = eng.Job(
        id=str(row["id"]),
        share=share_name,
        priority=row["priority"],
        submitted_at=to_ms(row["submitted_at"]),
        preferences=preferences,
        max_pending=max_pending * MS if max_pending is not None else None,
        # The engine's own checkpoint arithmetic serves the simulated fleet; agents report
        # their checkpoints, so the last reported one is all that is saved.
        checkpoint_interval=interval * MS if interval and simulated else None,
        restart_overhead=0,
        duration=duration * MS if duration is not None else None,
        preemptions=row["preemptions"],
        counted_preemptions=row["counted_preemptions"],
        recomputed=eng.exact(round(row["recomputed"] * MS)),
        started_at=to_ms(row["started_at"]) if row["started_at"] else None,
        last_checkpoint=eng.exact(round(row["checkpoint_work"] * MS)),
        work_done=eng.exact(round(row["work_done"] * MS)),
    )
    if row["state"] == JobState.RUNNING and row["instance_type_id"] is not None:
        type_name = row["type_name"]
        work = runs.current_work(
            _row_job(row), now, speed=speeds.get(type_name, 1.0), time_factor=factor
        )
        ej.state = eng.JobState.RUNNING
        ej.instance_type = type_name
        ej.preference = row["preference"]
        ej.count = int(row["preferences"][row["preference"] or 0]["count"])
        ej.run_started_at = to_ms(row["run_started_at"] or now)
        ej.work_done = eng.exact(round(work * MS))
        ej.progress_at = to_ms(now)
    return ej


def load(queue: JobQueue, now: datetime, *, lock: bool) -> Loaded:
    """Read one queue into a fresh engine (``lock`` takes the cycle's row locks)."""
    capacity = {
        row.instance_type.name: (row.count, row.instance_type)
        for row in QueueCapacity.objects.filter(queue=queue).select_related("instance_type")
    }
    shares = list(
        Share.objects.filter(queue=queue)
        .select_related("team")
        .prefetch_related("limits__instance_type")
        .order_by("id")
    )
    jobs_qs = Job.objects.filter(
        queue=queue, state__in=(JobState.PENDING, JobState.RUNNING)
    ).order_by("id")
    if lock:
        jobs_qs = jobs_qs.select_for_update(of=("self",))
    rows = list(jobs_qs.values(*JOB_FIELDS))
    factor = time_factor(queue)
    # The simulated fleet completes runs and checkpoints by itself, whatever its speed
    # (DEMO_TIME_FACTOR may be 1); agents report both.
    simulated = queue.executor == Executor.SIMULATED
    speeds = {name: float(itype.speed) for name, (_, itype) in capacity.items()}
    type_ids = {name: itype.pk for name, (_, itype) in capacity.items()}
    for share in shares:
        for limit in share.limits.all():
            type_ids.setdefault(limit.instance_type.name, limit.instance_type_id)
            speeds.setdefault(limit.instance_type.name, float(limit.instance_type.speed))
    type_names = {pk: name for name, pk in type_ids.items()}
    # Running jobs may sit on a type the queue no longer lists: it has capacity 0 now.
    unknown = {r["instance_type_id"] for r in rows if r["instance_type_id"] is not None}
    unknown -= set(type_names)
    for itype in InstanceType.objects.filter(pk__in=unknown):
        type_ids[itype.name] = itype.pk
        type_names[itype.pk] = itype.name
        speeds[itype.name] = float(itype.speed)

    usage: dict[str, int] = {}
    share_by_id = {s.pk: s for s in shares}
    active_rows: dict[str, dict[str, Any]] = {}
    loaded = Loaded(
        queue=queue,
        engine=None,  # type: ignore[arg-type]
        now=now,
        jobs=JobModels(active_rows),
        shares={s.name: s for s in shares},
        type_ids=type_ids,
        capacity={name: count for name, (count, _) in capacity.items()},
    )
    engine_jobs: list[eng.Job] = []
    disabled: list[int] = []
    for row in rows:
        if row["state"] == JobState.RUNNING and row["instance_type_id"] is not None:
            name = row["type_name"] = type_names[row["instance_type_id"]]
            if simulated and row["duration"] is not None:
                job = _row_job(row)
                done_at = _simulated_finish(job, speeds.get(name, 1.0), factor)
                if done_at is not None and done_at <= now:
                    loaded.completions.append((job, done_at))
                    continue
            count = int(row["preferences"][row["preference"] or 0]["count"])
            usage[name] = usage.get(name, 0) + count
        elif not share_by_id[row["share_id"]].enabled:
            disabled.append(row["id"])
            continue
        active_rows[str(row["id"])] = row
        engine_jobs.append(
            _engine_job(
                row, share_by_id[row["share_id"]].name, now, factor, speeds, simulated=simulated
            )
        )
    if disabled:
        loaded.disabled_pending = list(
            Job.objects.filter(pk__in=disabled).select_related("share").order_by("id")
        )

    # Build with room for what runs now, then shrink: a drop below usage is the engine's
    # capacity_lost rule, never a second implementation here.
    types = [
        eng.InstanceType(
            name=name,
            capacity=max(loaded.capacity.get(name, 0), usage.get(name, 0)),
            speed=eng.exact(speeds.get(name, 1.0)),
        )
        for name in sorted(type_ids)
    ]
    engine = eng.Engine(types, [_share_config(s) for s in shares])
    engine.restore(engine_jobs)
    loaded.engine = engine
    return loaded


def _simulated_finish(job: Job, speed: float, factor: float) -> datetime | None:
    """When a simulated run finishes its remaining work (None without a duration)."""
    if job.duration is None or job.run_started_at is None:
        return None
    overhead = job.restart_overhead if job.run > 1 and job.preemptions else 0
    seconds = (overhead + max(0.0, job.duration - job.work_done) / speed) / factor
    return job.run_started_at + timedelta(seconds=seconds)


def _versions(loaded: Loaded, *share_keys: str | None) -> dict[str, int]:
    out = {}
    for key in share_keys:
        if key is not None and key in loaded.shares:
            share = loaded.shares[key]
            out[share.name] = share.version
    return out


def _admission_text(loaded: Loaded, job: Job, d: eng.Decision) -> str:
    share = job.share
    limit = loaded.engine.shares[job.share.name].limits.get(d.instance_type or "", 0)
    where = f"{d.count} x {d.instance_type} (preference {(d.preference or 0) + 1})"
    if d.borrowed:
        return (
            f"Started on {where}, borrowing {d.borrowed} beyond {share.name}'s limit of "
            f"{limit} from idle capacity others lend."
        )
    return f"Started on {where} within {share.name}'s own limit of {limit}."


def _preemption_text(loaded: Loaded, job: Job, d: eng.Decision) -> str:
    if d.rule == "capacity_lost":
        return (
            f"Stopped: the queue's {d.instance_type} capacity dropped to "
            f"{loaded.capacity.get(d.instance_type or '', 0)}, below what was running."
        )
    by = loaded.jobs.get(d.by or "")
    by_name = by.name if by else d.by
    if d.rule == "reclaim" and by is not None:
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
    for d in decisions:
        job = loaded.jobs[d.job]
        if d.kind == "admitted":
            assert d.instance_type is not None and d.count is not None
            runs.run_admit(
                job=job,
                instance_type_id=loaded.type_ids[d.instance_type],
                instance_type_name=d.instance_type,
                count=d.count,
                preference=d.preference or 0,
                borrowed=d.borrowed or 0,
                rule="borrow" if d.borrowed else "own",
                share_versions=_versions(loaded, job.share.name),
                now=now,
                explanation=_admission_text(loaded, job, d),
            )
        elif d.kind == "preempted":
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
                counts_against_retries=d.rule != "capacity_lost",
                share_versions=_versions(loaded, job.share.name, by.share.name if by else None),
                now=now,
                explanation=_preemption_text(loaded, job, d),
            )
        elif d.kind == "timed_out":
            wait = (now - job.submitted_at).total_seconds()
            runs.run_time_out(
                job=job,
                now=now,
                explanation=(
                    f"Timed out: waited {wait:.0f} s without starting, past its max pending "
                    f"time of {job.max_pending} s."
                ),
            )
        else:
            continue  # "failed" is applied with its "preempted"
        applied += 1
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


def run_cycle(queue_id: int, *, now: datetime | None = None) -> CycleResult:
    """Schedule one queue at ``now``: completions, capacity drops, cycles, timeouts.

    Idempotent: running it again at once finds nothing left to decide.
    """
    # The completions this cycle applies are decided on by the cycle itself: they need
    # no further cycle (``hooks.cycle_running``).
    with transaction.atomic(), hooks.cycle_running(queue_id):
        queue = JobQueue.objects.select_for_update().get(pk=queue_id)
        now = now or timezone.now()
        loaded = load(queue, now, lock=True)
        result = CycleResult(queue_id=queue_id)
        for job, done_at in sorted(loaded.completions, key=lambda item: (item[1], item[0].pk)):
            runs.run_complete(actor=None, job_id=job.pk, run=job.run, now=done_at)
            result.completed += 1
        engine = loaded.engine
        ms = to_ms(now)
        decisions: list[eng.Decision] = []
        for name in sorted(loaded.type_ids):
            decisions += engine.set_capacity(name, loaded.capacity.get(name, 0), ms)
        decisions += engine.schedule(ms)
        decisions += engine.timeouts(ms)
        apply(loaded, decisions)
        result.admitted = sum(1 for d in decisions if d.kind == "admitted")
        result.preempted = sum(1 for d in decisions if d.kind == "preempted")
        result.timed_out = sum(1 for d in decisions if d.kind == "timed_out")
        result.next_event_in = _next_event_in(loaded, decisions, now)
    return result


def _next_event_in(loaded: Loaded, decisions: list[eng.Decision], now: datetime) -> float | None:
    """Seconds until this queue next needs a cycle without any outside change."""
    moments: list[float] = []
    deadline = loaded.engine.next_deadline()
    if deadline is not None:
        moments.append(deadline / MS - now.timestamp())
    factor = time_factor(loaded.queue)
    if loaded.queue.executor == Executor.SIMULATED:
        for ej in loaded.engine.jobs():
            if ej.state is eng.JobState.RUNNING:
                finish = loaded.engine.finish_time(ej)
                if finish is not None:
                    # The engine extrapolates at the clock's pace; the fleet runs faster.
                    remaining_ms = (finish - to_ms(now)) / factor
                    moments.append(remaining_ms / MS)
    if not moments:
        return None
    return max(0.0, min(moments))


# ---------------------------------------------------------------------- reading


def _reason_json(reasons: Iterable[eng.Reason]) -> list[dict[str, Any]]:
    return [r.to_json() for r in reasons]


def _disabled_reasons(job: Job) -> list[dict[str, Any]]:
    return [
        {
            "preference": index,
            "reason": DISABLED_REASON,
            "message": (
                f"Share {job.share.name} is disabled, so none of its jobs start; an admin "
                "can enable it again."
            ),
        }
        for index in range(len(job.preferences))
    ]


def explain_queue(queue_id: int) -> dict[int, list[dict[str, Any]]]:
    """Why each pending job of the queue waits, per preference (DESIGN section 4)."""
    return explain_queue_valid_for(queue_id)[0]


def explain_queue_valid_for(queue_id: int) -> tuple[dict[int, list[dict[str, Any]]], float | None]:
    """``explain_queue`` and for how many seconds its answer holds if nothing stored
    changes (None: until something stored changes), for callers that cache it.

    Only time changes the answer without a stored change: a simulated run that finishes
    (``load`` completes it in memory once due) frees its instances; the earliest such
    finish bounds the answer. Agents' runs end by a report, which is a stored change.
    """
    queue = JobQueue.objects.get(pk=queue_id)
    loaded = load(queue, timezone.now(), lock=False)
    engine = loaded.engine
    valid_for: float | None = None
    if queue.executor == Executor.SIMULATED:
        factor = time_factor(queue)
        types = engine.instance_types
        for row in loaded.jobs.rows.values():
            if row["state"] == JobState.RUNNING and row.get("type_name") in types:
                speed = float(types[row["type_name"]].speed)
                done_at = _simulated_finish(_row_job(row), speed, factor)
                if done_at is not None:
                    left = max(0.0, (done_at - loaded.now).total_seconds())
                    valid_for = left if valid_for is None else min(valid_for, left)
    # Reasons describe the state at the end of the instant: play the cycle that is due
    # now (simulated completions, capacity drops, admissions) in memory, applying nothing.
    # A job that cycle would start gets no reason: it is about to run.
    ms = to_ms(loaded.now)
    for name in sorted(loaded.type_ids):
        engine.set_capacity(name, loaded.capacity.get(name, 0), ms)
    engine.schedule(ms)
    out: dict[int, list[dict[str, Any]]] = {}
    for key, row in loaded.jobs.rows.items():
        if row["state"] == JobState.PENDING and engine.job(key).state is eng.JobState.PENDING:
            out[row["id"]] = _reason_json(engine.explain(key))
    for job in loaded.disabled_pending:
        out[job.pk] = _disabled_reasons(job)
    return out, valid_for


def explain_job(job: Job) -> list[dict[str, Any]]:
    """Why one pending job waits, per preference; empty when it is not pending."""
    if job.state != JobState.PENDING:
        return []
    return explain_queue(job.queue_id).get(job.pk, [])


def usage(queue_id: int) -> list[dict[str, Any]]:
    """Per share and type accounting as the engine computes it (for the usage API)."""
    queue = JobQueue.objects.get(pk=queue_id)
    loaded = load(queue, timezone.now(), lock=False)
    rows = []
    for name in sorted(loaded.type_ids):
        for row in loaded.engine.accounting(name):
            share = loaded.shares[row.share]
            rows.append(
                {
                    "share": share.pk,
                    "share_name": share.name,
                    "instance_type": name,
                    "limit": row.limit,
                    "usage": row.usage,
                    "own": row.own,
                    "borrowed": row.borrowed,
                    "idle": row.idle,
                    "free": row.free,
                }
            )
    return rows


# ---------------------------------------------------------------------- preview


def _job_row(loaded: Loaded, job_key: str, rule: str, instance_type: str | None) -> dict[str, Any]:
    job = loaded.jobs[job_key]
    share = job.share
    return {
        "job": job.pk,
        "name": job.name,
        "share": share.name,
        "team": share.team.name,
        "rule": rule,
        "instance_type": instance_type,
    }


def preview_share_change(share: Share, proposed: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What the next cycle would do if ``share`` took the ``proposed`` fields.

    Compares the engine's next schedule on the live state with and without the change,
    so only what the change itself causes is listed: ``preempted`` (jobs the next cycle
    would stop, with the rule), ``started`` (pending jobs that would start) and
    ``reclaimable`` (running jobs of the share that would sit beyond its new limit, open
    to reclaim). ``proposed`` holds share fields as the share service takes them
    (``limits`` as ``{type: count}``); invalid values raise ``ValidationFailed``.
    """
    from governance.services.shares import validate_share_fields

    fields = validate_share_fields(share, proposed)
    queue = share.queue
    now = timezone.now()
    loaded = load(queue, now, lock=False)
    key = share.name
    ms = to_ms(now)
    baseline_engine = loaded.engine.copy()
    changed_engine = loaded.engine.copy()
    engine_fields: dict[str, Any] = {}
    for name in ("policy", "limits", "in_share_preemption", "preemption_retries"):
        if name in fields:
            engine_fields[name] = fields[name]
    if "policy" in engine_fields:
        engine_fields["policy"] = eng.Policy(engine_fields["policy"])
    if "borrow_limit" in fields or "policy" in fields:
        borrow = fields.get("borrow_limit", share.borrow_limit)
        engine_fields["borrow_limit"] = borrow if borrow is not None else eng.UNLIMITED
    if engine_fields:
        changed_engine.set_share(key, **engine_fields)

    def outcome(engine: eng.Engine) -> tuple[dict[str, eng.Decision], dict[str, eng.Decision]]:
        decisions = []
        for name in sorted(loaded.type_ids):
            decisions += engine.set_capacity(name, loaded.capacity.get(name, 0), ms)
        if fields.get("enabled") is False:
            for job in list(engine.pending_jobs()):
                if job.share == key:
                    engine.cancel(job.id, ms)
        decisions += engine.schedule(ms)
        started = {d.job: d for d in decisions if d.kind == "admitted"}
        stopped = {d.job: d for d in decisions if d.kind == "preempted"}
        return started, stopped

    base_started, base_stopped = outcome(baseline_engine)
    new_started, new_stopped = outcome(changed_engine)
    preempted = [
        _job_row(loaded, k, d.rule or "", d.instance_type)
        for k, d in new_stopped.items()
        if k not in base_stopped
    ]
    started = [
        _job_row(loaded, k, "borrow" if d.borrowed else "own", d.instance_type)
        for k, d in new_started.items()
        if k not in base_started
    ]
    reclaimable = []
    new_limits = fields.get("limits")
    if new_limits is not None or "policy" in fields:
        limits = new_limits if new_limits is not None else loaded.engine.shares[key].limits
        old_limits = loaded.engine.shares[key].limits
        usage_by_type: dict[str, int] = {}
        for ej in loaded.engine.jobs():
            if ej.share == key and ej.state is eng.JobState.RUNNING and ej.instance_type:
                usage_by_type[ej.instance_type] = usage_by_type.get(ej.instance_type, 0) + ej.count
        for type_name, used in sorted(usage_by_type.items()):
            before = max(0, used - old_limits.get(type_name, 0))
            after = max(0, used - limits.get(type_name, 0))
            if after > before:
                for ej in loaded.engine.jobs():
                    if (
                        ej.share == key
                        and ej.state is eng.JobState.RUNNING
                        and ej.instance_type == type_name
                    ):
                        row = _job_row(loaded, ej.id, "reclaim", type_name)
                        row["borrowed_after"] = after
                        reclaimable.append(row)
    return {"preempted": preempted, "reclaimable": reclaimable, "started": started}


__all__ = [
    "CycleResult",
    "explain_job",
    "explain_queue",
    "explain_queue_valid_for",
    "load",
    "preview_share_change",
    "run_cycle",
    "usage",
]
