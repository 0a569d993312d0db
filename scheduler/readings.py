"""Reads that need the engine: why jobs wait, usage as the engine counts it, and what a
share change would do. Each loads the queue into a fresh engine without locks, plays the
current instant in memory (``scheduler.cycle.decide.play_instant``) and applies nothing.

Governance reaches these through one module, ``governance.selectors.scheduling``, which
adds caching and permission checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from governance.models import DecisionRule, Job, JobQueue, JobState, Share
from scheduler import engine as eng
from scheduler.cycle.decide import play_instant
from scheduler.cycle.read import load
from scheduler.cycle.snapshot import QueueSnapshot, row_job, to_ms
from scheduler.engine import accounting, exposure
from scheduler.engine.forecast import (
    FORECAST_BUDGET_SECONDS,
    FORECAST_HORIZON_SECONDS,
    FORECAST_MAX_STEPS,
    FORECAST_MIN_STEP_MS,
    FORECAST_RELATIVE,
    play_entitled,
    play_forward,
)
from scheduler.executors import simulated

DISABLED_REASON = "share_disabled"


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


def _valid_for(loaded: QueueSnapshot) -> float | None:
    """For how many seconds a reading of ``loaded`` holds if nothing stored changes.

    Only time changes the answer without a stored change: a simulated run that finishes
    (``load`` completes it in memory once due) frees its instances; the earliest such
    finish bounds the answer. Other executors' runs end by a report, a stored change. A
    capacity plan's next start or end (docs/scheduling.md#capacity-plans) bounds it too, whatever
    runs the queue.
    """
    valid_for: float | None = None
    for plan in loaded.plans.values():
        for moment in (plan.start, plan.end):
            if moment > loaded.now:
                left = (moment - loaded.now).total_seconds()
                valid_for = left if valid_for is None else min(valid_for, left)
    if not simulated.runs_itself(loaded.queue):
        return valid_for
    factor = simulated.time_factor(loaded.queue)
    for row in loaded.jobs.rows.values():
        if row["state"] == JobState.RUNNING and row.get("type_name") in loaded.type_ids:
            speed = float(loaded.engine.instance_types[row["type_name"]].speed)
            done_at = simulated.finish(row_job(row), speed, factor)
            if done_at is not None:
                left = max(0.0, (done_at - loaded.now).total_seconds())
                valid_for = left if valid_for is None else min(valid_for, left)
    return valid_for


def explain_queue(queue_id: int) -> tuple[dict[int, list[dict[str, Any]]], float | None]:
    """Why each pending job of the queue waits, per preference
    (docs/scheduling.md#why-is-my-job-waiting), and for how many seconds that answer holds if
    nothing stored changes (None: until
    something stored changes), for callers that cache it.

    Reasons describe the state at the end of the instant: the cycle that is due now is
    played in memory first, and a job it would start gets no reason: it is about to run.
    """
    queue = JobQueue.objects.get(pk=queue_id)
    loaded = load(queue, timezone.now(), lock=False)
    valid_for = _valid_for(loaded)
    play_instant(loaded)
    engine = loaded.engine
    # a preference running out of time for its job's deadline changes its reason too
    change = engine.next_eligibility_change()
    if change is not None:
        left = max(0.0, (change - to_ms(loaded.now)) / 1000)
        valid_for = left if valid_for is None else min(valid_for, left)
    out: dict[int, list[dict[str, Any]]] = {}
    for key, row in loaded.jobs.rows.items():
        if row["state"] == JobState.PENDING and engine.job(key).state is eng.JobState.PENDING:
            out[row["id"]] = _reason_json(engine.explain(key))
    for job in loaded.disabled_pending:
        out[job.pk] = _disabled_reasons(job)
    return out, valid_for


def _finishes(loaded: QueueSnapshot, engine: eng.Engine) -> dict[str, int | None]:
    """Each running job's expected end in clock ms (None: unknown): the simulated fleet's
    own finish time, or for other executors the last reported progress extrapolated at
    the type's speed."""
    simulated_fleet = simulated.runs_itself(loaded.queue)
    factor = simulated.time_factor(loaded.queue)
    finish_at: dict[str, int | None] = {}
    for key, row in loaded.jobs.rows.items():
        if row["state"] != JobState.RUNNING or row.get("type_name") not in loaded.type_ids:
            continue
        if simulated_fleet:
            speed = float(loaded.engine.instance_types[row["type_name"]].speed)
            done_at = simulated.finish(row_job(row), speed, factor)
            finish_at[key] = to_ms(done_at) if done_at is not None else None
        else:
            finish_at[key] = engine.finish_time(engine.job(key))
    return finish_at


# The live bounds of a forecast (scheduler.engine.forecast), for either playback.
_BOUNDS: dict[str, Any] = {
    "horizon": FORECAST_HORIZON_SECONDS * 1000,
    "max_steps": FORECAST_MAX_STEPS,
    "relative": FORECAST_RELATIVE,
    "min_step": FORECAST_MIN_STEP_MS,
    "budget": FORECAST_BUDGET_SECONDS,
}


def forecast_queue(queue_id: int) -> tuple[dict[int, dict[str, Any]], str, float | None]:
    """Position in the cycle's order and estimated start of every pending job of the
    queue (``scheduler.engine.forecast``), the basis of the estimates in words, and for
    how many seconds the answer holds (as ``explain_queue``).

    The current instant is played first on a copy of the live state (a job it starts is
    estimated to start now); then the copy is played forward. A running job's end is
    known when it declares its work (``_finishes``).
    """
    queue = JobQueue.objects.get(pk=queue_id)
    loaded = load(queue, timezone.now(), lock=False)
    valid_for = _valid_for(loaded)
    engine = loaded.engine.copy()
    finish_at = _finishes(loaded, engine)
    now_started = [
        d.job for d in play_instant(loaded, engine) if d.kind == eng.DecisionKind.ADMITTED
    ]
    forecast = play_forward(
        engine,
        to_ms(loaded.now),
        finish_at,
        time_factor=simulated.time_factor(loaded.queue),
        admitted_now=now_started,
        **_BOUNDS,
    )
    out: dict[int, dict[str, Any]] = {}
    for key, position in forecast.position.items():
        start_ms = forecast.starts.get(key)
        out[int(key)] = {
            "position": position,
            "estimated_start": start_ms / 1000 if start_ms is not None else None,
            "times_out": key in forecast.timed_out,
        }
    return out, forecast.basis(), valid_for


def entitled_forecast_queue(
    queue_id: int,
) -> tuple[dict[int, dict[str, Any]], str, float | None]:
    """Every pending job's estimated start on its share's entitlement alone
    (``scheduler.engine.forecast.play_entitled``: nobody lends from now on), as
    ``forecast_queue`` gives the start as things are: ``{"estimated_start" (epoch
    seconds or None), "times_out", "never"}`` per job id (``never``: no preference fits
    its share's own limits), the basis in words and how long the answer holds."""
    queue = JobQueue.objects.get(pk=queue_id)
    loaded = load(queue, timezone.now(), lock=False)
    valid_for = _valid_for(loaded)
    engine = loaded.engine.copy()
    forecast = play_entitled(
        engine,
        to_ms(loaded.now),
        _finishes(loaded, engine),
        play_now=lambda copy: play_instant(loaded, copy),
        time_factor=simulated.time_factor(loaded.queue),
        **_BOUNDS,
    )
    out: dict[int, dict[str, Any]] = {}
    for key in forecast.position:
        start_ms = forecast.starts.get(key)
        out[int(key)] = {
            "estimated_start": start_ms / 1000 if start_ms is not None else None,
            "times_out": key in forecast.timed_out,
            "never": key in forecast.never,
        }
    return out, forecast.basis(), valid_for


def exposure_queue(queue_id: int) -> tuple[dict[int, dict[str, Any]], float | None]:
    """How exposed each running job on borrowed capacity is (``scheduler.engine.exposure``),
    by job id, in the stored state: its share's borrowed instances on the type, who lent
    them (with each lender's waiting work there), the shares whose waiting work fits
    their own idle entitlement (``wanted_back_by``), the job that reclaims it in the
    cycle due now (``reclaimed_now_by``, played on a copy as ``lending_now`` does), and
    ``status``: ``reclaim_imminent`` when either holds, else ``may_be_reclaimed``."""
    queue = JobQueue.objects.get(pk=queue_id)
    loaded = load(queue, timezone.now(), lock=False)
    valid_for = _valid_for(loaded)
    found = exposure.exposures(loaded.engine)
    if not found:
        return {}, valid_for
    reclaimed = {d.job: d.by for d in _reclaims_now(loaded)}
    shares = loaded.shares
    out: dict[int, dict[str, Any]] = {}
    for key, exposed in found.items():
        by = reclaimed.get(key)
        lenders = []
        for lender in exposed.lenders:
            share = shares[lender.lender] if lender.lender is not None else None
            demand = lender.demand
            lenders.append(
                {
                    "source": lender.source,
                    "share": share.pk if share is not None else None,
                    "share_name": share.name if share is not None else None,
                    "team_name": share.team.name if share is not None else None,
                    "instances": lender.instances,
                    "waiting_jobs": demand.jobs if demand is not None else 0,
                    "waiting_instances": demand.instances if demand is not None else 0,
                }
            )
        out[int(key)] = {  # engine ids are the jobs' ids as strings
            "instance_type": exposed.instance_type,
            "count": exposed.count,
            "share_borrowed": exposed.share_borrowed,
            "lenders": lenders,
            "wanted_back_by": list(exposed.wanted_back_by),
            "reclaimed_now_by": int(by) if by is not None else None,
            "status": (
                "reclaim_imminent" if exposed.imminent or by is not None else "may_be_reclaimed"
            ),
        }
    return out, valid_for


def usage(queue_id: int) -> list[dict[str, Any]]:
    """Per share and type accounting as the engine computes it."""
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


def _job_row(
    loaded: QueueSnapshot, job_key: str, rule: str, instance_type: str | None
) -> dict[str, Any]:
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


def preview_share_change(share: Share, fields: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What the next cycle would do if ``share`` took the validated ``fields``.

    Compares the engine's next schedule on the live state with and without the change,
    so only what the change itself causes is listed: ``preempted`` (jobs the next cycle
    would stop, with the rule), ``started`` (pending jobs that would start) and
    ``reclaimable`` (running jobs of the share that would sit beyond its new limit, open
    to reclaim). ``fields`` are share fields as the share service validated them
    (``limits`` as ``{type: count}``).
    """
    loaded = load(share.queue, timezone.now(), lock=False)
    key = share.name
    ms = to_ms(loaded.now)
    baseline_engine = loaded.engine.copy()
    strict = fields.get("borrow_requires_verified_recovery")
    if strict is not None and strict != share.borrow_requires_verified_recovery:
        # Which jobs may borrow is decided when the queue is read: read it again so.
        changed_engine = load(
            share.queue, loaded.now, lock=False, verified_rule={share.pk: strict}
        ).engine
    else:
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
        if fields.get("enabled") is False:
            for job in list(engine.pending_jobs()):
                if job.share == key:
                    engine.cancel(job.id, ms)
        decisions = play_instant(loaded, engine)
        started = {d.job: d for d in decisions if d.kind == eng.DecisionKind.ADMITTED}
        stopped = {d.job: d for d in decisions if d.kind == eng.DecisionKind.PREEMPTED}
        return started, stopped

    base_started, base_stopped = outcome(baseline_engine)
    new_started, new_stopped = outcome(changed_engine)
    preempted = [
        _job_row(loaded, k, d.rule or "", d.instance_type)
        for k, d in new_stopped.items()
        if k not in base_stopped
    ]
    started = [
        _job_row(
            loaded, k, DecisionRule.BORROW if d.borrowed else DecisionRule.OWN, d.instance_type
        )
        for k, d in new_started.items()
        if k not in base_started
    ]
    return {
        "preempted": preempted,
        "reclaimable": _reclaimable(loaded, key, fields),
        "started": started,
    }


def _reclaimable(loaded: QueueSnapshot, key: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
    """Running jobs of the share on types where the change makes it borrow more."""
    new_limits = fields.get("limits")
    if new_limits is None and "policy" not in fields:
        return []
    old_limits = loaded.engine.shares[key].limits
    limits = new_limits if new_limits is not None else old_limits
    running = [
        ej
        for ej in loaded.engine.jobs()
        if ej.share == key and ej.state is eng.JobState.RUNNING and ej.instance_type
    ]
    usage_by_type: dict[str, int] = {}
    for ej in running:
        assert ej.instance_type is not None
        usage_by_type[ej.instance_type] = usage_by_type.get(ej.instance_type, 0) + ej.count
    reclaimable = []
    for type_name, used in sorted(usage_by_type.items()):
        before = accounting.borrowed(old_limits.get(type_name, 0), used)
        after = accounting.borrowed(limits.get(type_name, 0), used)
        if after > before:
            for ej in running:
                if ej.instance_type == type_name:
                    row = _job_row(loaded, ej.id, DecisionRule.RECLAIM, type_name)
                    row["borrowed_after"] = after
                    reclaimable.append(row)
    return reclaimable


def _ms_time(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms is not None else None


def lending_now(share: Share) -> dict[str, Any]:
    """The lending ledger's reading of now for ``share`` (docs/ledger.md).

    On the live state as the engine loads it: per type, who holds the share's idle
    entitlement (``lent``: borrower, its running jobs, instances, since when) and whose
    capacity the share holds itself (``borrowed``: lender or the source), attributed by
    the engine (``exposure.lending_by_type``: ``accounting.lending`` with the shares in
    name order, as the pages count ``lent``); each borrowing run's ``exposure``: its place
    in the engine's victim order among the runs open to reclaim on its type, the work it
    would lose now, and the job that reclaims it in the cycle due now
    (``reclaimed_now_by``, None when none does). ``would_reclaim``: the reclaims the
    share's pending jobs make when the cycle due now runs, from the engine's own cycle
    played on a copy (as the share preview plays it).
    """
    loaded = load(share.queue, timezone.now(), lock=False)
    reclaims = _reclaims_now(loaded)
    key = share.name
    lent: list[dict[str, Any]] = []
    borrowed: list[dict[str, Any]] = []
    own_runs: list[dict[str, Any]] = []
    for lending in exposure.lending_by_type(loaded.engine).values():
        runs = _BorrowingRuns(loaded, lending, reclaims)
        own_runs += runs.in_victim_order(key)
        for row in lending.rows:
            if row.lender == key:
                lent.append(_lent_row(loaded, lending.instance_type, row, runs))
            if row.borrower == key:
                borrowed.append(_borrowed_row(loaded, lending.instance_type, row))
    return {
        "at": loaded.now,
        "lent": lent,
        "borrowed": borrowed,
        "borrowing_runs": own_runs,
        "would_reclaim": _would_reclaim(loaded, key, reclaims),
    }


def _reclaims_now(loaded: QueueSnapshot) -> list[eng.Decision]:
    """The reclaims of the cycle due now, played on a copy of the engine: each a victim's
    preemption with the job that takes its capacity back (``by``)."""
    return [
        d
        for d in play_instant(loaded, loaded.engine.copy())
        if d.kind == eng.DecisionKind.PREEMPTED
        and d.rule == DecisionRule.RECLAIM
        and d.by is not None
    ]


class _BorrowingRuns:
    """The runs on one type's borrowed capacity as the ledger shows them: each with its
    place in the engine's victim order (``exposure.open_to_reclaim``), the work it would
    lose now and the job that reclaims it in the cycle due now."""

    def __init__(
        self, loaded: QueueSnapshot, lending: exposure.TypeLending, reclaims: list[eng.Decision]
    ) -> None:
        self.loaded = loaded
        self.ms = to_ms(loaded.now)
        self.exposed = exposure.open_to_reclaim(loaded.engine, lending, self.ms)
        self.rank = {job.id: index + 1 for index, job in enumerate(self.exposed)}
        self.running = lending.running
        self.reclaimed_by: dict[str, str] = {}
        for d in reclaims:
            self.reclaimed_by.setdefault(d.job, d.by or "")

    def in_victim_order(self, share_key: str) -> list[dict[str, Any]]:
        """The rows of the runs of ``share_key`` open to reclaim, in victim order."""
        return [self.row(job) for job in self.exposed if job.share == share_key]

    def of_share(self, share_key: str) -> list[dict[str, Any]]:
        """The rows of every run of ``share_key`` on the type, in the engine's job order."""
        return [self.row(job) for job in self.running if job.share == share_key]

    def row(self, job: eng.Job) -> dict[str, Any]:
        by = self.reclaimed_by.get(job.id)
        row = _job_row(self.loaded, job.id, DecisionRule.BORROW, job.instance_type)
        row.update(
            count=job.count,
            since=_ms_time(job.run_started_at),
            exposure={
                "reclaim_rank": self.rank.get(job.id),
                "open_to_reclaim": len(self.exposed),
                "lost_work_now": float(self.loaded.engine.lost_work_at(job, self.ms)),
                "reclaimed_now_by": self.loaded.jobs[by].pk if by is not None else None,
            },
        )
        return row


def _lent_row(
    loaded: QueueSnapshot, type_name: str, row: accounting.Lending[str], runs: _BorrowingRuns
) -> dict[str, Any]:
    """A lender's row: the borrower holding its idle entitlement, and the borrower's runs."""
    return {
        "instance_type": type_name,
        "borrower": loaded.shares[row.borrower].pk,
        "borrower_name": row.borrower,
        "instances": row.count,
        "runs": runs.of_share(row.borrower),
    }


def _borrowed_row(
    loaded: QueueSnapshot, type_name: str, row: accounting.Lending[str]
) -> dict[str, Any]:
    """A borrower's row: whose capacity it holds (a lender, or capacity no share owns)."""
    lender = loaded.shares[row.lender] if row.lender is not None else None
    return {
        "instance_type": type_name,
        "source": row.source,
        "lender": lender.pk if lender is not None else None,
        "lender_name": row.lender,
        "instances": row.count,
    }


def _would_reclaim(
    loaded: QueueSnapshot, key: str, reclaims: list[eng.Decision]
) -> list[dict[str, Any]]:
    """The reclaims the pending jobs of share ``key`` make in the cycle due now: each
    victim, the job that takes it back and the work the victim loses."""
    mine = {job.id for job in loaded.engine.jobs() if job.share == key}
    out = []
    for d in reclaims:
        if d.by in mine:
            victim = _job_row(loaded, d.job, DecisionRule.RECLAIM, d.instance_type)
            victim.update(
                count=d.count,
                by=loaded.jobs[d.by].pk,
                by_name=loaded.jobs[d.by].name,
                lost_work=float(d.lost_work or 0),
            )
            out.append(victim)
    return out
