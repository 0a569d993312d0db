"""A queue's recorded history as a scenario file (docs/signals.md, "History export").

``export(queue, start, stop)`` reads the database (jobs, their timeline events, and the
audit entries of share and capacity changes) and returns ``{"scenario", "recorded",
"teams"}``: a section-3 scenario in milliseconds relative to ``start`` that the scenario
runner can replay, what really happened in the window in section-3 output form
(``{"events", "jobs"}``), and each share's team. :func:`policy_entries` gives the audit
entries that the ``policy_changes`` signal counts, for :mod:`scheduler.signals`.

What the export says and where it only approximates (docs/signals.md):

- types: the queue's types (and any type a share limit or a job preference names) with
  their capacity at ``start``; later capacity changes are ``set_capacity`` actions;
- shares: as they were at ``start`` (the ``before`` of the first later edit in the audit
  trail), later edits as ``set_share`` actions;
- jobs: every job submitted in the window, and the jobs pending or running at ``start``
  (listed as submitted at 0 with their remaining work, estimated as the declared work less
  what the run going on at ``start`` had done); priority changes and cancellations are
  actions, failures other than preemption ``cancel`` actions at their time;
- work: ``duration`` is the declared work in work-milliseconds; without one, the work
  the last run did (to its completion, or to the window's end plus one second). Work
  (duration, checkpoint interval, lost work) is whole units, rounded up. The simulated
  fleet runs ``DEMO_TIME_FACTOR`` times faster than the clock, so for its queues each
  type's ``speed`` is its speed x the factor (and restart overhead, a time, is on the
  clock): work stays the declared work and the replay stays on the recorded clock;
- ``recorded``: ``{"events", "jobs"}`` as the runner's output gives them, for the
  listed jobs as seen from the window (a job that started before it counts as started
  at 0, like its submission).

:func:`signals_window` is what the signals of a window are computed from: not the
window's export, but the jobs active at its start and those submitted in it, from their
real submission, with every event they had.

For a queue run by the simulated fleet whose cycles ran at every moment something
happened, replaying the export of a window that starts before its first submission
reproduces ``recorded`` exactly (``tests/services/test_history.py``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

import psycopg
from django.db import connection
from django.db.models import Min, Q
from psycopg.types.numeric import Int8BinaryLoader

from governance.models import (
    AuditEntry,
    AuditEvent,
    CapacityPlan,
    Decision,
    InstanceType,
    Job,
    JobEvent,
    JobQueue,
    QueueCapacity,
    Share,
    ShareLimit,
    Workload,
)
from scheduler import signals
from scheduler.executors import simulated
from scheduler.gcpause import gc_paused

MS = 1000
SHARE_FIELDS = ("policy", "borrow_limit", "limits", "in_share_preemption", "preemption_retries")
POLICY_EVENTS = {
    AuditEvent.SHARE_UPDATED: "share_edits",
    AuditEvent.EXCEPTION_FILED: "exceptions_filed",
    AuditEvent.EXCEPTION_APPROVED: "exceptions_approved",
    AuditEvent.EXCEPTION_REJECTED: "exceptions_rejected",
    AuditEvent.EXCEPTION_EXPIRED: "exceptions_expired",
    AuditEvent.EXCEPTION_WITHDRAWN: "exceptions_withdrawn",
    AuditEvent.JOB_REPRIORITISED: "priority_changes",
    AuditEvent.CHANGE_REQUEST_FILED: "change_requests.filed",
    AuditEvent.CHANGE_REQUEST_APPROVED: "change_requests.approved",
    AuditEvent.CHANGE_REQUEST_REJECTED: "change_requests.rejected",
    AuditEvent.CHANGE_REQUEST_WITHDRAWN: "change_requests.withdrawn",
}


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def _us(moment: datetime) -> int:
    """Microseconds since the epoch, exactly (what the database keeps)."""
    return (moment - EPOCH) // MICROSECOND


PG_EPOCH_US = 946_684_800_000_000
"""2000-01-01 in epoch µs: PostgreSQL keeps a ``timestamptz`` as µs since then."""


def _ms(moment: datetime) -> int:
    """Whole milliseconds since the epoch (rounded down, exactly)."""
    return _us(moment) // MS


def _whole(value: float) -> int:
    """Work as whole units, rounded up (a value within rounding of an integer is that
    integer), so every reader of the scenario format takes it."""
    return math.ceil(value - 1e-6)


def _share_fields(snapshot: dict[str, Any]) -> dict[str, Any]:
    borrow = snapshot.get("borrow_limit")
    return {
        "policy": snapshot.get("policy", "RESERVE"),
        "borrow_limit": -1 if borrow is None else borrow,
        "limits": dict(snapshot.get("limits") or {}),
        "in_share_preemption": bool(snapshot.get("in_share_preemption")),
        "preemption_retries": snapshot.get("preemption_retries"),
    }


def _current_shares(queue: JobQueue) -> dict[int, tuple[str, str, dict[str, Any]]]:
    limits: dict[int, dict[str, int]] = defaultdict(dict)
    for share_id, type_name, count in ShareLimit.objects.filter(share__queue=queue).values_list(
        "share_id", "instance_type__name", "count"
    ):
        limits[share_id][type_name] = count
    out = {}
    for share in Share.objects.filter(queue=queue).select_related("team").order_by("id"):
        snapshot = {
            "policy": share.policy,
            "borrow_limit": share.borrow_limit,
            "limits": limits[share.pk],
            "in_share_preemption": share.in_share_preemption,
            "preemption_retries": share.preemption_retries,
        }
        out[share.pk] = (share.name, share.team.name, _share_fields(snapshot))
    return out


def export(
    queue: JobQueue, start: datetime, stop: datetime, *, now: datetime | None = None
) -> dict[str, Any]:
    """The history of ``queue`` over ``[start, stop)`` (see the module's docstring)."""
    return _export(queue, start, stop, now=now)


def _export(
    queue: JobQueue,
    start: datetime,
    stop: datetime,
    *,
    now: datetime | None = None,
    active_from: datetime | None = None,
) -> dict[str, Any]:
    """:func:`export`; with ``active_from``, only the jobs submitted in the window that
    were still active at ``active_from`` or submitted after it (what the signals of a
    window starting at ``active_from`` can see, when ``start`` is no later than the
    submission of every job active then)."""
    clock = _Clock.of(start, stop, now)
    # The simulated fleet does its work ``factor`` times faster than the clock: its types
    # are given that much speed, so work stays declared work and replays on the clock.
    factor = simulated.time_factor(queue)
    shares = _current_shares(queue)
    initial, share_actions = _share_history(queue, shares, start, stop, clock)
    capacity, capacity_actions, all_types = _capacity_history(queue, start, stop, clock)

    # ---- jobs: submitted in the window, or active at its start. Read as plain rows with
    # times in epoch microseconds (no datetime or ORM object per row: a 30-day window of a
    # 100,000-job queue is 100,000 jobs and twice as many events).
    rows = _job_rows(queue.pk, start, stop, active_from)
    strict_shares = _strict_shares(queue)
    unverified: list[str] = []
    # (at in µs, event id, type, data) per job; the event id keeps the order decisions were
    # made. One query joined on the same job condition (a list of 100,000 ids would cost
    # more to send and parse than the events themselves).
    timeline = _timelines(queue.pk, start, stop, active_from)
    speeds = dict(InstanceType.objects.values_list("name", "speed"))

    jobs: list[dict[str, Any]] = []
    job_actions: list[dict[str, Any]] = []
    named_plans: set[str] = set()
    recorded: list[tuple[int, int, dict[str, Any]]] = []
    job_rows: dict[str, dict[str, Any]] = {}
    for row in rows:
        share_name = shares[row["share_id"]][0]
        events = timeline.get(row["id"], [])
        job = _scenario_job(row, share_name, events, clock)
        all_types.update(p["instance_type"] for p in job["preferences"] if "instance_type" in p)
        named_plans.update(p["plan"] for p in job["preferences"] if "plan" in p)
        if _job_work_fields(job, row, events, clock, speeds, factor, share_name in strict_shares):
            unverified.append(job["id"])
        jobs.append(job)
        job_rows[job["id"]] = _job_record(job, events, clock, recorded, job_actions)

    recorded.sort(key=lambda item: (item[0], item[1]))
    plans, plan_actions = _plans(queue, start, stop, named_plans, clock.rel)
    all_types.update(p["instance_type"] for p in plans)
    actions = sorted(
        capacity_actions + share_actions + plan_actions + job_actions, key=lambda a: a["at"]
    )
    types = _instance_types(all_types | _limit_types(initial), capacity, factor)
    scenario = _scenario(queue, start, stop, clock, types, shares, initial, plans, jobs, actions)
    exported: dict[str, Any] = {
        "scenario": scenario,
        "recorded": {"events": [event for _, _, event in recorded], "jobs": job_rows},
        "teams": {name: team for name, team, _ in shares.values()},
        "decisions": decision_entries(queue, start, stop),
        "recovery": {"required": sorted(strict_shares), "unverified": unverified},
    }
    _add_certified(exported, rows)
    return exported


def _scenario(
    queue: JobQueue,
    start: datetime,
    stop: datetime,
    clock: _Clock,
    types: list[dict[str, Any]],
    shares: dict[int, tuple[str, str, dict[str, Any]]],
    initial: dict[int, dict[str, Any]],
    plans: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    actions: list[dict[str, Any]],
) -> dict[str, Any]:
    """The scenario file of an export: its parts in the format's order."""
    return {
        "version": 1,
        "description": f"History of queue {queue.name} from {start.isoformat()} "
        f"to {stop.isoformat()}",
        "time_unit": "ms",
        "instance_types": types,
        "shares": [{"name": name, **initial[pk]} for pk, (name, _, _) in sorted(shares.items())],
        **({"plans": plans} if plans else {}),
        "jobs": jobs,
        "actions": actions,
        "until": _ms(stop) - clock.t0 - 1,
    }


def _add_certified(exported: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """What certification_drift reads (docs/signals.md): only when a job names one."""
    certified = certified_runtimes(
        {row["id"]: row["workload_id"] for row in rows if row["workload_id"] is not None}
    )
    if certified:
        exported["certified"] = certified


@dataclass(frozen=True)
class _Clock:
    """The export's window on the clock: ``t0`` its start in epoch ms (the scenario's
    time 0), ``t0_us``/``stop_us`` its bounds and ``end_us`` the end of what happened
    (now, for a window still open), in epoch µs."""

    t0: int
    t0_us: int
    stop_us: int
    end_us: int

    @classmethod
    def of(cls, start: datetime, stop: datetime, now: datetime | None) -> _Clock:
        return cls(
            t0=_ms(start),
            t0_us=_us(start),
            stop_us=_us(stop),
            end_us=_us(min(stop, now) if now is not None else stop),
        )

    def rel(self, moment: datetime) -> int:
        return _ms(moment) - self.t0

    def from_2000(self) -> _Clock:
        """The same clock with its µs and ms counted from 2000-01-01 (:data:`PG_EPOCH_US`,
        a whole number of ms), as the lean read's rows give times: ``at // MS - t0`` and
        every comparison and difference come out as they do from the epoch."""
        return _Clock(
            t0=self.t0 - PG_EPOCH_US // MS,
            t0_us=self.t0_us - PG_EPOCH_US,
            stop_us=self.stop_us - PG_EPOCH_US,
            end_us=self.end_us - PG_EPOCH_US,
        )

    def rel_us(self, moment: int) -> int:
        return moment // MS - self.t0


def _strict_shares(queue: JobQueue) -> set[str]:
    """Shares lending their borrowing only to verified recovery (docs/workloads.md): their
    jobs whose workload is not verified (now) replay with may_borrow false, as the
    scheduler ran them; ``recovery`` lists those jobs so a what-if may turn it on or off."""
    return set(
        Share.objects.filter(queue=queue, borrow_requires_verified_recovery=True).values_list(
            "name", flat=True
        )
    )


def _share_history(
    queue: JobQueue,
    shares: dict[int, tuple[str, str, dict[str, Any]]],
    start: datetime,
    stop: datetime,
    clock: _Clock,
) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """The shares' fields as at ``start`` (the ``before`` of their first edit since, or
    now) and their edits in the window as ``set_share`` actions."""
    initial = {pk: dict(fields) for pk, (_, _, fields) in shares.items()}
    share_actions: list[dict[str, Any]] = []
    seen_first: set[int] = set()
    edits = (
        AuditEntry.objects.filter(
            queue=queue, event_type=AuditEvent.SHARE_UPDATED, created_at__gte=start
        )
        .order_by("created_at", "id")
        .values_list("share_id", "created_at", "before", "after")
    )
    for share_id, changed_at, before, after in edits:
        if share_id not in shares:
            continue
        if share_id not in seen_first and isinstance(before, dict):
            initial[share_id] = _share_fields(before)
            seen_first.add(share_id)
        if changed_at < stop and isinstance(after, dict):
            fields = _share_fields(after)
            share_actions.append(
                {
                    "at": clock.rel(changed_at),
                    "type": "set_share",
                    "share": shares[share_id][0],
                    **fields,
                }
            )
    return initial, share_actions


def _capacity_history(
    queue: JobQueue, start: datetime, stop: datetime, clock: _Clock
) -> tuple[dict[str, int], list[dict[str, Any]], set[str]]:
    """The capacity as at ``start``, its changes in the window as ``set_capacity``
    actions, and every type it named."""
    capacity = dict(
        QueueCapacity.objects.filter(queue=queue).values_list("instance_type__name", "count")
    )
    changes = list(
        AuditEntry.objects.filter(
            queue=queue, event_type=AuditEvent.CAPACITY_CHANGED, created_at__gte=start
        )
        .order_by("created_at", "id")
        .values_list("created_at", "before", "after")
    )
    if changes and isinstance(changes[0][1], dict):
        capacity = dict(changes[0][1].get("capacity") or {})
    capacity_actions: list[dict[str, Any]] = []
    running_capacity = dict(capacity)
    all_types = set(capacity)
    for changed_at, _, after in changes:
        if changed_at >= stop or not isinstance(after, dict):
            continue
        new = dict(after.get("capacity") or {})
        for name in sorted(set(new) | set(running_capacity)):
            if new.get(name, 0) != running_capacity.get(name, 0):
                capacity_actions.append(
                    {
                        "at": clock.rel(changed_at),
                        "type": "set_capacity",
                        "instance_type": name,
                        "capacity": new.get(name, 0),
                    }
                )
        all_types |= set(new)
        running_capacity = new
    return capacity, capacity_actions, all_types


def _scenario_job(
    row: Mapping[str, Any], share_name: str, events: list[list[Any]], clock: _Clock
) -> dict[str, Any]:
    """A job row as a scenario job, without its work: id, share, submission (0 for one
    submitted before the window), the priority it had at the window's start, and its
    preferences."""
    priority = row["priority"]
    reprioritised = [e for e in events if e[2] == "reprioritised" and e[0] >= clock.t0_us]
    if reprioritised and "before" in reprioritised[0][3]:
        priority = reprioritised[0][3]["before"]
    prefs = _scenario_prefs(row["preferences"])
    before_start = row["submitted_us"] < clock.t0_us
    return {
        "id": str(row["id"]),
        "share": share_name,
        "submit_at": 0 if before_start else clock.rel_us(row["submitted_us"]),
        "priority": priority,
        "kind": row["kind"],
        "preferences": prefs,
    }


def _job_work(
    row: Mapping[str, Any],
    events: list[list[Any]],
    clock: _Clock,
    speeds: Mapping[str, Any],
    factor: float,
) -> float:
    """The job's work in work-milliseconds of declared work (a run does speed x factor of
    it per millisecond of the clock): declared, or what the last run did; less what it
    had done by the window's start when it was running then."""
    t0_us = clock.t0_us
    last_admit: tuple[int, str] | None = None
    done_at: int | None = None
    running_at_start: tuple[int, str] | None = None
    for at, _, type_, data, _ in events:
        if type_ == "admitted":
            last_admit = (at, data.get("instance_type", ""))
            if at < t0_us:
                running_at_start = last_admit
        elif type_ in ("preempted", "completed", "failed", "cancelled", "lost"):
            if type_ == "completed":
                done_at = at
            if at < t0_us:
                running_at_start = None
    work = _work(row["duration"], last_admit, done_at, clock, speeds, factor)
    if row["submitted_us"] < t0_us and running_at_start is not None:
        rate = float(speeds.get(running_at_start[1], 1.0)) * factor
        work -= (clock.t0 - running_at_start[0] // MS) * rate
    return work


def _work(
    declared: int | None,
    last_admit: tuple[int, str] | None,
    done_at: int | None,
    clock: _Clock,
    speeds: Mapping[str, Any],
    factor: float,
) -> float:
    """A job's work in work-milliseconds: ``declared`` (seconds), or what its last run
    (admitted at ``last_admit`` = (µs, type)) did by its completion at ``done_at`` (µs),
    or, still going, by one second past the end; never run, a second of the clock."""
    if declared is not None:
        return float(declared * MS)
    if last_admit is None:
        return MS * factor  # never ran: what a second of the clock does, past the end
    rate = float(speeds.get(last_admit[1], 1.0)) * factor
    until = done_at if done_at is not None else clock.end_us
    work = (until // MS - last_admit[0] // MS) * rate
    return work + (0 if done_at is not None else MS * rate)  # to one second past the end


def _scenario_prefs(stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's stored preferences as the scenario's: a plan or a type with its count, and
    the expected run time in milliseconds when it has one."""
    prefs = [
        {"plan": p["plan"], "count": int(p["count"])}
        if p.get("plan")
        else {"instance_type": p["instance_type"], "count": int(p["count"])}
        for p in stored
    ]
    for pref, given in zip(prefs, stored, strict=True):
        if given.get("runtime") is not None:
            pref["runtime"] = int(given["runtime"]) * MS
    return prefs


def _set_duration(job: dict[str, Any], declared: int | None, work: float) -> None:
    """The job's ``duration``: its work in whole work-milliseconds (at least 1), except for
    a job without declared work whose preferences give expected run times."""
    job["duration"] = max(1, _whole(work))
    if declared is None and any("runtime" in p for p in job["preferences"]):
        # its expected run times decide its deadline and budget (and a replayed run
        # of it lasts one): a duration made up from the run would override them
        del job["duration"]


def _job_work_fields(
    job: dict[str, Any],
    row: Mapping[str, Any],
    events: list[list[Any]],
    clock: _Clock,
    speeds: Mapping[str, Any],
    factor: float,
    strict: bool,
) -> bool:
    """Add the job's work and its optional fields, when it has them: pending bound,
    checkpoints, restart overhead, and its interruption class and constrained fallback,
    so a replay keeps them. ``strict``: its share lends its borrowing only to verified
    recovery. True when the job may borrow but its workload is not verified."""
    _set_duration(job, row["duration"], _job_work(row, events, clock, speeds, factor))
    if row["max_pending"] is not None:
        job["max_pending"] = row["max_pending"] * MS
    if row["checkpoint_interval"]:
        job["checkpoint_interval"] = max(1, _whole(row["checkpoint_interval"] * MS))
    if row["restart_overhead"]:
        # seconds of preparation on the fleet's clock
        job["restart_overhead"] = round(row["restart_overhead"] * MS / factor)
    unverified = False
    if not row["may_borrow"]:
        job["may_borrow"] = False
    elif row["workload__recovery_status"] != "verified":
        unverified = True
        if strict:
            job["may_borrow"] = False
    if not row["preemptible"]:
        job["preemptible"] = False
    if row["deadline_us"] is not None:
        job["deadline"] = max(0, clock.rel_us(row["deadline_us"]))
    if row["max_cost"] is not None:
        cost = float(row["max_cost"])
        job["max_cost"] = int(cost) if cost.is_integer() else cost
    return unverified


def _job_record(
    job: Mapping[str, Any],
    events: list[list[Any]],
    clock: _Clock,
    recorded: list[tuple[int, int, dict[str, Any]]],
    job_actions: list[dict[str, Any]],
) -> dict[str, Any]:
    """Add the job's events in the window to ``recorded`` (with their time and id, for
    the order) and its cancellations and priority changes to ``job_actions``; return the
    job's row of the runner's output, as seen from the window (a job that started before
    it counts as started at 0, like its submission)."""
    key = job["id"]
    rel_us = clock.rel_us
    run: tuple[str, int, str | None] | None = None
    outcome: dict[str, Any] = {
        "state": "PENDING",
        "started_at": None,
        "finished_at": None,
        "preemptions": 0,
        "recomputed": 0,
        "preference": None,
    }
    for at, event_id, type_, data, _ in events:
        if type_ == "admitted":
            run = (
                data.get("instance_type", ""),
                int(data.get("count", 0)),
                data.get("plan") or None,
            )
            outcome["preference"] = data.get("preference", 0)
            if outcome["started_at"] is None:
                outcome["started_at"] = max(0, rel_us(at))
        if not clock.t0_us <= at < clock.stop_us:
            if type_ in ("preempted", "completed", "failed", "cancelled", "lost"):
                run = None
            continue
        event = _recorded_event(key, type_, data, run)
        if type_ in ("preempted", "lost"):
            outcome["preemptions"] += 1
            outcome["recomputed"] += event["lost_work"] if event else 0
        if type_ in ("preempted", "lost", "failed", "completed", "timed_out", "cancelled"):
            run = None
        if type_ == "cancelled" or (
            type_ == "failed" and data.get("reason") != "preemption_retries_exhausted"
        ):
            job_actions.append({"at": rel_us(at), "type": "cancel", "job": key})
        elif type_ == "reprioritised" and "after" in data:
            job_actions.append(
                {"at": rel_us(at), "type": "set_priority", "job": key, "priority": data["after"]}
            )
        if event is not None:
            recorded.append((at, event_id, {"at": rel_us(at), **event}))
            if event["type"] in RUN_STATES:
                outcome["state"] = RUN_STATES[event["type"]]
                outcome["finished_at"] = rel_us(at)
    if outcome["state"] == "PENDING" and run is not None:
        outcome["state"] = "RUNNING"
    started = outcome["started_at"]
    return {
        "state": outcome["state"],
        "started_at": started,
        "finished_at": outcome["finished_at"],
        "wait": None if started is None else started - job["submit_at"],
        "preemptions": outcome["preemptions"],
        "recomputed": outcome["recomputed"],
        "preference": outcome["preference"],
    }


def _recorded_event(
    key: str, type_: str, data: Mapping[str, Any], run: tuple[str, int, str | None] | None
) -> dict[str, Any] | None:
    """A job event in the window in the runner's output form (``run``: the job's run
    before it), or None for one the output does not carry."""
    if type_ == "admitted":
        return {
            "type": "admitted",
            "job": key,
            **({"plan": data["plan"]} if data.get("plan") else {}),
            "instance_type": data.get("instance_type"),
            "count": int(data.get("count", 0)),
            "preference": data.get("preference", 0),
            "borrowed": data.get("borrowed", 0),
        }
    if type_ in ("preempted", "lost"):
        return {
            "type": "preempted",
            "job": key,
            **({"plan": run[2]} if run and run[2] else {}),
            "instance_type": run[0] if run else None,
            "count": run[1] if run else None,
            "reason": data.get("reason") if type_ == "preempted" else "capacity_lost",
            "by": str(data["by"]) if data.get("by") is not None else None,
            "lost_work": _whole(float(data.get("lost_work") or 0) * MS),
        }
    if type_ == "failed":
        return {"type": "failed", "job": key, "reason": data.get("reason")}
    if type_ in ("completed", "cancelled"):
        return {"type": type_, "job": key}
    if type_ == "timed_out":
        return {"type": type_, "job": key, "reason": data.get("reason", "max_pending")}
    return None


def _instance_types(
    names: set[str], capacity: Mapping[str, int], factor: float
) -> list[dict[str, Any]]:
    """The scenario's instance types: every type named, with its capacity at the start
    and its speed times the fleet's time factor."""
    type_rows = {t.name: t for t in InstanceType.objects.filter(name__in=names)}
    return [
        {
            "name": name,
            "capacity": int(capacity.get(name, 0)),
            "accelerated": type_rows[name].accelerated,
            "speed": float(type_rows[name].speed) * factor,
            "hourly_price": float(type_rows[name].hourly_price),
        }
        for name in sorted(type_rows)
    ]


RUN_STATES = {
    "completed": "SUCCEEDED",
    "failed": "FAILED",
    "timed_out": "TIMED_OUT",
    "cancelled": "CANCELLED",
}


def _exported_jobs(prefix: str, start: datetime, stop: datetime, active_from: datetime | None) -> Q:
    """The jobs an export lists (``prefix`` reaches a job from the model queried): those
    submitted in the window and those pending or running at its start; with
    ``active_from``, those submitted in the window and active at ``active_from`` or later."""

    def q(**terms: Any) -> Q:
        return Q(**{prefix + name: value for name, value in terms.items()})

    submitted = q(submitted_at__gte=start, submitted_at__lt=stop)
    if active_from is None:
        active = q(submitted_at__lt=start) & (
            q(finished_at__isnull=True) | q(finished_at__gte=start)
        )
        return submitted | active
    return submitted & (
        q(submitted_at__gte=active_from)
        | q(finished_at__isnull=True)
        | q(finished_at__gte=active_from)
    )


def _exported_sql(alias: str, active_from: datetime | None) -> str:
    """:func:`_exported_jobs` in SQL on the job table as ``alias``; parameters ``start``,
    ``stop`` (and ``active_from``) by name."""
    submitted = f"{alias}.submitted_at >= %(start)s AND {alias}.submitted_at < %(stop)s"
    if active_from is None:
        return (
            f"(({submitted}) OR ({alias}.submitted_at < %(start)s AND "
            f"({alias}.finished_at IS NULL OR {alias}.finished_at >= %(start)s)))"
        )
    return (
        f"({submitted} AND ({alias}.submitted_at >= %(active_from)s OR "
        f"{alias}.finished_at IS NULL OR {alias}.finished_at >= %(active_from)s))"
    )


def _epoch_us(column: str) -> str:
    return f"(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint"


SKIPPED_EVENTS = ("submitted", "checkpoint", "claimed", "started", "stopped")


def _rows(
    select: list[str], rest: str, params: dict[str, Any], *, build: str = "json_build_array"
) -> list[Any]:
    """The rows of ``SELECT select FROM rest`` as lists, sent by the server as one JSON
    array and decoded at once: decoding 200,000 small JSON values one by one (jsonb
    columns, as drivers do) costs more than the query itself."""
    sql = f"SELECT COALESCE(json_agg({build}({', '.join(select)})), '[]')::text FROM {rest}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        text = cursor.fetchone()[0]
    rows: list[Any] = json.loads(text)
    return rows


def _job_rows(
    queue_id: int, start: datetime, stop: datetime, active_from: datetime | None
) -> list[dict[str, Any]]:
    """The exported jobs (:func:`_exported_jobs`) by id, as dicts of the columns the export
    reads, their times in epoch microseconds (``submitted_us``, ``deadline_us``)."""
    columns = {
        "id": "j.id",
        "share_id": "j.share_id",
        "priority": "j.priority",
        "preferences": "j.preferences",
        "count": "j.count",
        "max_pending": "j.max_pending",
        "checkpoint_interval": "j.checkpoint_interval",
        "duration": "j.duration",
        "restart_overhead": "j.restart_overhead",
        "submitted_us": _epoch_us("j.submitted_at"),
        "kind": "j.kind",
        "may_borrow": "j.may_borrow",
        "preemptible": "j.preemptible",
        "deadline_us": _epoch_us("j.deadline"),
        "max_cost": "j.max_cost::float8",
        "workload_id": "j.workload_id",
        "workload__recovery_status": "w.recovery_status",
    }
    rest = (
        f"{Job._meta.db_table} j LEFT JOIN {Workload._meta.db_table} w ON w.id = j.workload_id "
        f"WHERE j.queue_id = %(queue)s AND {_exported_sql('j', active_from)}"
    )
    params = {"queue": queue_id, "start": start, "stop": stop, "active_from": active_from}
    rows: list[dict[str, Any]] = _rows(
        [", ".join(f"'{name}', {sql}" for name, sql in columns.items())],
        rest,
        params,
        build="json_build_object",
    )
    rows.sort(key=itemgetter("id"))
    return rows


def _timelines(
    queue_id: int, start: datetime, stop: datetime, active_from: datetime | None
) -> dict[int, list[list[Any]]]:
    """Each exported job's events before ``stop`` as ``[at in epoch µs, id, type, data,
    job id]``, in the order they happened (time, then id)."""
    select = [_epoch_us("e.at"), "e.id", "e.type", "COALESCE(e.data, '{}'::jsonb)", "e.job_id"]
    rest = (
        f"{JobEvent._meta.db_table} e JOIN {Job._meta.db_table} j ON j.id = e.job_id "
        "WHERE j.queue_id = %(queue)s AND e.at < %(stop)s AND NOT (e.type = ANY(%(skipped)s)) "
        f"AND {_exported_sql('j', active_from)}"
    )
    params = {
        "queue": queue_id,
        "start": start,
        "stop": stop,
        "active_from": active_from,
        "skipped": list(SKIPPED_EVENTS),
    }
    rows = _rows(select, rest, params)
    # sorted here rather than by the server, whose sort of 200,000 rows spills to disk:
    # by id, then (stably) by time
    rows.sort(key=itemgetter(1))
    rows.sort(key=itemgetter(0))
    timeline: dict[int, list[list[Any]]] = defaultdict(list)
    for row in rows:
        timeline[row[4]].append(row)
    return timeline


# ---- the recording a window's signals read (signals_window), read lean: only what the
# signals and the lending ledger read of the export's jobs and events, as plain tuples

RECORDED_EVENTS = ("admitted", "preempted", "lost", "failed", "completed", "cancelled", "timed_out")
"""The job events the runner's output form carries (:func:`_recorded_event`)."""


class _UnpreparedCursor(psycopg.Cursor[Any]):
    """psycopg's server-binding cursor, its statements never prepared on the server:
    PgBouncer in transaction mode may stand in front (docs/operations.md)."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, **kwargs: Any
    ) -> Any:
        return super().execute(query, params, prepare=False, **kwargs)


def _fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` in PostgreSQL's binary format, each ``timestamptz`` column as
    the integer the server keeps (µs since 2000-01-01, :data:`PG_EPOCH_US`): for 100,000
    jobs and twice as many events, the server converts no time to a number or text and
    this process parses no text. Binary results need server-side binding, so the cursor
    is psycopg's own on Django's connection (in its transaction, never prepared), wrapped
    as Django wraps its cursors (logged and counted like every query)."""
    connection.ensure_connection()
    raw: Any = _UnpreparedCursor(connection.connection)  # (a DB-API cursor to Django)
    raw.format = psycopg.pq.Format.BINARY
    raw.adapters.register_loader("timestamptz", Int8BinaryLoader)
    wrapped = (
        connection.make_debug_cursor(raw)
        if connection.queries_logged
        else connection.make_cursor(raw)
    )
    with wrapped as cursor:
        cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def _window_job_rows(
    queue_id: int, start: datetime, stop: datetime, active_from: datetime
) -> list[tuple[Any, ...]]:
    """The listed jobs (:func:`_exported_sql`) as ``(id, share id, submitted µs,
    preferences as JSON text, declared duration, deadline µs or None, workload id)``,
    by id, times counted from 2000-01-01 (:func:`_fetch`). Plain columns: building
    100,000 JSON objects costs the server more than sending the rows."""
    sql = (
        "SELECT j.id, j.share_id, j.submitted_at, j.preferences::text, j.duration, "
        f"j.deadline, j.workload_id FROM {Job._meta.db_table} j "
        f"WHERE j.queue_id = %(queue)s AND {_exported_sql('j', active_from)}"
    )
    params = {"queue": queue_id, "start": start, "stop": stop, "active_from": active_from}
    rows = _fetch(sql, params)
    rows.sort()  # ids are unique: only they are compared
    return rows


def _window_event_rows(
    queue_id: int, start: datetime, stop: datetime, active_from: datetime
) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """The listed jobs' events before ``stop`` that the recording carries
    (:data:`RECORDED_EVENTS`) as ``(at µs, id, job id, type, data as JSON text)`` in the
    order they happened (time, then id), ``at`` counted from 2000-01-01 (:func:`_fetch`),
    and their data, decoded in one call (``data`` is never null)."""
    sql = (
        "SELECT e.at, e.id, e.job_id, e.type, e.data::text "
        f"FROM {JobEvent._meta.db_table} e JOIN {Job._meta.db_table} j ON j.id = e.job_id "
        "WHERE j.queue_id = %(queue)s AND e.at < %(stop)s AND e.type = ANY(%(kinds)s) "
        f"AND {_exported_sql('j', active_from)}"
    )
    params = {
        "queue": queue_id,
        "start": start,
        "stop": stop,
        "active_from": active_from,
        "kinds": list(RECORDED_EVENTS),
    }
    rows = _fetch(sql, params)
    rows.sort()  # (at, id) is unique: nothing further is compared
    data: list[dict[str, Any]] = json.loads("[" + ",".join([row[4] for row in rows]) + "]")
    return rows, data


def _window_recorded(
    rows: list[tuple[Any, ...]],
    data: list[dict[str, Any]],
    keys: Mapping[int, str],
    clock: _Clock,
    undeclared: set[int],
) -> tuple[list[dict[str, Any]], dict[int, tuple[int, str]], dict[int, int]]:
    """The events of the window in the runner's output form, as :func:`_job_record` adds
    them to ``recorded`` (each built at once as :func:`_recorded_event` gives it, ``at``
    first: this loop runs once per event), and the last admission ``(µs, type)`` and
    completion (µs) of each job of ``undeclared``, the jobs without declared work, whose
    work their runs give (:func:`_work`)."""
    runs: dict[int, tuple[str, int, str | None]] = {}  # each job's run going
    admits: dict[int, tuple[int, str]] = {}
    done: dict[int, int] = {}
    events: list[dict[str, Any]] = []
    append = events.append
    t0_us, stop_us, t0 = clock.t0_us, clock.stop_us, clock.t0
    for (at, _, job_id, type_, _), datum in zip(rows, data, strict=True):
        inside = t0_us <= at < stop_us
        if type_ == "admitted":
            kind = datum.get("instance_type", "")
            plan = datum.get("plan")
            count = int(datum.get("count", 0))
            runs[job_id] = (kind, count, plan or None)
            if job_id in undeclared:
                admits[job_id] = (at, kind)
            if inside:
                if plan:
                    event = {"at": at // MS - t0, "type": "admitted", "job": keys[job_id]}
                    event["plan"] = plan
                    event["instance_type"] = datum.get("instance_type")
                    event["count"] = count
                    event["preference"] = datum.get("preference", 0)
                    event["borrowed"] = datum.get("borrowed", 0)
                else:  # (the same keys in the same order, at once)
                    event = {
                        "at": at // MS - t0,
                        "type": "admitted",
                        "job": keys[job_id],
                        "instance_type": datum.get("instance_type"),
                        "count": count,
                        "preference": datum.get("preference", 0),
                        "borrowed": datum.get("borrowed", 0),
                    }
                append(event)
            continue
        if type_ == "completed" and job_id in undeclared:
            done[job_id] = at
        if not inside:
            if type_ != "timed_out":
                runs.pop(job_id, None)
            continue
        # every recorded event but an admission ends the run
        if type_ == "completed" or type_ == "cancelled":
            runs.pop(job_id, None)
            append({"at": at // MS - t0, "type": type_, "job": keys[job_id]})
        elif type_ == "preempted" or type_ == "lost":
            run = runs.pop(job_id, None)
            event = {"at": at // MS - t0, "type": "preempted", "job": keys[job_id]}
            if run and run[2]:
                event["plan"] = run[2]
            event["instance_type"] = run[0] if run else None
            event["count"] = run[1] if run else None
            event["reason"] = datum.get("reason") if type_ == "preempted" else "capacity_lost"
            by = datum.get("by")
            event["by"] = str(by) if by is not None else None
            event["lost_work"] = _whole(float(datum.get("lost_work") or 0) * MS)
            append(event)
        elif type_ == "failed" or type_ == "timed_out":
            runs.pop(job_id, None)
            if type_ == "failed":
                reason = datum.get("reason")
            else:
                reason = datum.get("reason", "max_pending")
            append({"at": at // MS - t0, "type": type_, "job": keys[job_id], "reason": reason})
    return events, admits, done


def _window_jobs(
    rows: list[tuple[Any, ...]],
    names: Mapping[int, str],
    keys: Mapping[int, str],
    runs: tuple[dict[int, tuple[int, str]], dict[int, int]],
    clock: _Clock,
    speeds: Mapping[str, Any],
    factor: float,
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The listed jobs as the scenario's, with what the signals read: id (``keys``), share,
    submission, preferences, work (``duration``, from ``runs``: each job's last admission
    and completion) and deadline; and the distinct lists of preferences. Every job was
    submitted at or after the recording's start (:func:`signals_window`), so none is
    listed at 0 with its remaining work. Jobs submitted with the same preferences share
    one list of them (read only)."""
    admits, done = runs
    t0 = clock.t0
    parsed: dict[str, list[dict[str, Any]]] = {}
    jobs: list[dict[str, Any]] = []
    append = jobs.append
    for job_id, share_id, submitted_us, text, declared, deadline_us, _ in rows:
        prefs = parsed.get(text)
        if prefs is None:
            prefs = parsed[text] = _scenario_prefs(json.loads(text))
        job = {
            "id": keys[job_id],
            "share": names[share_id],
            "submit_at": submitted_us // MS - t0,
            "preferences": prefs,
        }
        if declared is not None:
            # _set_duration of the declared work, at once: whole seconds (an integer
            # column) are whole milliseconds, as _whole gives them
            job["duration"] = max(1, declared * MS)
        else:
            work = _work(declared, admits.get(job_id), done.get(job_id), clock, speeds, factor)
            _set_duration(job, declared, work)
        if deadline_us is not None:
            job["deadline"] = max(0, deadline_us // MS - t0)
        append(job)
    return jobs, list(parsed.values())


def _window_export(
    queue: JobQueue, start: datetime, stop: datetime, *, now: datetime, active_from: datetime
) -> dict[str, Any]:
    """What the signals and the lending ledger read of ``_export(queue, start, stop,
    now=now, active_from=active_from)``, equal to it: the scenario (its jobs with only
    id, share, submission, preferences, ``duration`` and ``deadline``, and no job
    actions), the recorded events, the teams and ``certified``. ``start`` is no later
    than the submission of every job active at ``active_from``. Read lean: plain rows,
    no per-job timeline, no job rows of the runner's output."""
    clock = _Clock.of(start, stop, now)
    rows_clock = clock.from_2000()  # (the rows' times: _fetch)
    factor = simulated.time_factor(queue)
    shares = _current_shares(queue)
    initial, share_actions = _share_history(queue, shares, start, stop, clock)
    capacity, capacity_actions, all_types = _capacity_history(queue, start, stop, clock)
    rows = _window_job_rows(queue.pk, start, stop, active_from)
    keys = {row[0]: str(row[0]) for row in rows}
    undeclared = {row[0] for row in rows if row[4] is None}
    events, admits, done = _window_recorded(
        *_window_event_rows(queue.pk, start, stop, active_from), keys, rows_clock, undeclared
    )
    speeds = dict(InstanceType.objects.values_list("name", "speed"))
    names = {pk: name for pk, (name, _, _) in shares.items()}
    jobs, distinct = _window_jobs(rows, names, keys, (admits, done), rows_clock, speeds, factor)
    named_plans: set[str] = set()
    for prefs in distinct:
        all_types.update(p["instance_type"] for p in prefs if "instance_type" in p)
        named_plans.update(p["plan"] for p in prefs if "plan" in p)
    plans, plan_actions = _plans(queue, start, stop, named_plans, clock.rel)
    all_types.update(p["instance_type"] for p in plans)
    actions = sorted(capacity_actions + share_actions + plan_actions, key=lambda a: a["at"])
    types = _instance_types(all_types | _limit_types(initial), capacity, factor)
    exported: dict[str, Any] = {
        "scenario": _scenario(
            queue, start, stop, clock, types, shares, initial, plans, jobs, actions
        ),
        "recorded": {"events": events},
        "teams": {name: team for name, team, _ in shares.values()},
    }
    certified = certified_runtimes({row[0]: row[6] for row in rows if row[6] is not None})
    if certified:
        exported["certified"] = certified
    return exported


def _plans(
    queue: JobQueue,
    start: datetime,
    stop: datetime,
    named: set[str],
    rel: Any,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The queue's capacity plans (docs/scheduling.md#capacity-plans) that overlap the window or
    that an exported job names, as scenario ``plans``, with their count at ``start`` (the ``before``
    of the
    first later resize) and later resizes as ``set_plan`` actions. Times are relative to
    ``start`` and clipped at 0 (a plan that ended before the window, named by a job still
    waiting then, is kept as an empty one so the file stays valid)."""
    rows = list(
        CapacityPlan.objects.filter(queue=queue)
        .filter(Q(start__lt=stop, end__gt=start) | Q(name__in=named))
        .select_related("share", "instance_type")
        .order_by("start", "id")
    )
    if not rows:
        return [], []
    by_name = {plan.name: plan for plan in rows}
    counts = {plan.name: plan.count for plan in rows}
    actions: list[dict[str, Any]] = []
    seen: set[str] = set()
    resizes = (
        AuditEntry.objects.filter(
            queue=queue, event_type=AuditEvent.PLAN_RESIZED, created_at__gte=start
        )
        .order_by("created_at", "id")
        .values_list("created_at", "before", "after")
    )
    for at, before, after in resizes:
        if not isinstance(after, dict) or after.get("name") not in by_name:
            continue
        name = str(after["name"])
        if name not in seen and isinstance(before, dict) and "count" in before:
            counts[name] = int(before["count"])
            seen.add(name)
        if at < stop:
            actions.append(
                {"at": rel(at), "type": "set_plan", "plan": name, "count": int(after["count"])}
            )
    plans = []
    for plan in rows:
        begin = max(0, rel(plan.start))
        end = rel(plan.end)
        count = counts[plan.name]
        if end <= begin:
            end, count = begin + 1, 0
        plans.append(
            {
                "name": plan.name,
                "instance_type": plan.instance_type.name,
                "count": count,
                "share": plan.share.name,
                "start": begin,
                "end": end,
                "hourly_price": float(plan.hourly_price),
            }
        )
    return plans, actions


def _limit_types(shares: dict[int, dict[str, Any]]) -> set[str]:
    return {name for fields in shares.values() for name in fields["limits"]}


def policy_entries(
    queue: JobQueue, start: datetime, stop: datetime, *, origin: datetime | None = None
) -> list[dict[str, Any]]:
    """Audit entries of ``[start, stop)`` counted by ``policy_changes``, ``at`` in ms
    relative to ``origin`` (default ``start``)."""
    t0 = _ms(start if origin is None else origin)
    rows = (
        AuditEntry.objects.filter(
            Q(queue=queue) | Q(share__queue=queue) | Q(job__queue=queue),
            event_type__in=list(POLICY_EVENTS),
            created_at__gte=start,
            created_at__lt=stop,
        )
        .order_by("created_at", "id")
        .values_list("event_type", "created_at", "share__name", "team__name", "job__share__name")
    )
    return [
        {
            "at": _ms(at) - t0,
            "type": POLICY_EVENTS[AuditEvent(event_type)],
            "share": share or job_share,
            "team": team,
        }
        for event_type, at, share, team, job_share in rows
    ]


def decision_entries(
    queue: JobQueue, start: datetime, stop: datetime, *, origin: datetime | None = None
) -> list[dict[str, Any]]:
    """The decisions of the queue's jobs (docs/workloads.md#decisions) that the window
    ``[start, stop)`` can count: opened before its end and not decided before its start
    (an earlier answer counts nowhere in it). ``{"job", "share", "opened", "due",
    "decided"}``, times in ms relative to ``origin`` (default ``start``); ``decided`` null
    while open or when it came after the window."""
    t0 = _ms(start if origin is None else origin)
    rows = (
        Decision.objects.filter(job__queue=queue, opened_at__lt=stop)
        .filter(Q(decided_at__isnull=True) | Q(decided_at__gte=start))
        .order_by("opened_at", "id")
        .values_list("job_id", "job__share__name", "opened_at", "due_at", "decided_at")
    )
    return [
        {
            "job": job_id,
            "share": share,
            "opened": _ms(opened) - t0,
            "due": _ms(due) - t0,
            "decided": _ms(decided) - t0 if decided is not None and decided < stop else None,
        }
        for job_id, share, opened, due, decided in rows
    ]


@dataclass(frozen=True)
class SignalsWindow:
    """What the signals of a window are computed from: a recording that begins no later
    than the submission of every job active at the window's start, and the window
    ``[start, stop)`` in its milliseconds."""

    recording: signals.Recording
    start: int
    stop: int


def recording_start(queue: JobQueue, start: datetime) -> datetime:
    """Where the recording of a window starting at ``start`` begins: the submission of the
    earliest job still active then, or ``start``."""
    first = (
        Job.objects.filter(queue=queue, submitted_at__lt=start)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=start))
        .aggregate(first=Min("submitted_at"))["first"]
    )
    return min(start, first) if first is not None else start


def signals_window(
    queue: JobQueue, start: datetime, stop: datetime, *, now: datetime
) -> SignalsWindow:
    """The queue's recording for the signals of ``[start, stop)`` (docs/signals.md, "Rules
    of counting"): the jobs submitted in the window and those active at its start, from
    their real submission with every event they had, so runs going at ``start`` are
    integrated from ``start`` on, a job first admitted before it has no first admission in
    the window, turnarounds run from the real submission and a job's earlier preemptions
    count where its whole life does. Jobs that had ended by ``start`` can change no figure
    of the window, so they are left out: the cost follows the window, not the history."""
    origin = recording_start(queue, start)
    with gc_paused():  # (hundreds of thousands of rows, events and jobs built)
        exported = _window_export(queue, origin, stop, now=now, active_from=start)
    t0 = _ms(origin)
    lo, hi = _ms(start) - t0, _ms(stop) - t0
    recording = signals.Recording(
        scenario=exported["scenario"],
        events=exported["recorded"]["events"],
        teams=exported["teams"],
        audit=policy_entries(queue, start, stop, origin=origin),
        end=max(lo, min(hi, _ms(now) - t0)),
        decisions=decision_entries(queue, start, stop, origin=origin),
        certified=exported.get("certified"),
    )
    return SignalsWindow(recording, lo, hi)


def certified_runtimes(workloads: dict[int, int]) -> dict[str, dict[str, Any]]:
    """For ``certification_drift`` (docs/signals.md): per job naming a workload (``workloads``:
    job id -> workload id), the workload's name and the certified run time (ms) of each of
    its certified configurations, keyed as the recording's ``admitted`` events name them."""
    from governance.models import Certification, CertificationState

    if not workloads:
        return {}
    configs: dict[int, dict[str, int]] = defaultdict(dict)
    names: dict[int, str] = {}
    for cert in Certification.objects.filter(
        workload_id__in=set(workloads.values()), state=CertificationState.CERTIFIED
    ).select_related("workload", "instance_type", "plan"):
        configs[cert.workload_id][cert.configuration] = cert.runtime * MS
        names[cert.workload_id] = cert.workload.name
    return {
        str(job_id): {"workload": names[workload_id], "configurations": configs[workload_id]}
        for job_id, workload_id in workloads.items()
        if workload_id in configs
    }


def window_signals(
    queue: JobQueue, start: datetime, stop: datetime, *, now: datetime, group_by: str = "share"
) -> dict[str, Any]:
    """The signals of ``[start, stop)`` as recorded (:func:`signals_window`), the end of
    the recording at ``min(stop, now)``."""
    window = signals_window(queue, start, stop, now=now)
    return signals.compute(window.recording, window.start, window.stop, group_by=group_by)
