"""Signals of docs/signals.md: whether sharing turns idle capacity into finished work
without costing owners their predictable access, computed from a recording.

Plain Python, no Django: the same function serves a live queue (its recording from
``history.signals_window``: the jobs active at the window's start and those submitted in
it, from their real submission), a history file and both sides of a what-if. A window's
figures come from a recording that begins before it: state at ``start`` (runs going,
first admissions, preemptions) is built from the events before it, never counted. A
**recording** is a scenario in section-3 form (``time_unit`` "ms" or seconds), the
events recorded for it in section-3 output form, the share -> team map, and optionally
the audit entries that count as policy changes.

The figures come from one pass over the events in time order. Time-integrated figures
(instance-seconds, cost, utilization, idle lendable capacity) keep one accumulator per
(share, type) and per type that is flushed only when its value changes, so the pass costs
a constant per event whatever the window; each interval takes the state at the end of its
first instant (every change at one instant is applied before the instant's interval
starts counting).

Rules of counting (docs/signals.md): an event is in the window ``[from, to)`` when
``from <= at < to``; integrals run over ``[from, min(to, E))`` where ``E`` is the end of
the recording (``until`` + 1 time unit for a history file, "now" for a live queue).
Percentiles use the nearest rank; an empty set or a zero denominator gives ``None``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.engine.drift import drift
from scheduler.gcpause import gc_paused

FINAL_STATES = {
    "completed": "SUCCEEDED",
    "failed": "FAILED",
    "timed_out": "TIMED_OUT",
    "cancelled": "CANCELLED",
}
RUN_ENDS = frozenset({"preempted", "completed", "failed", "cancelled"})
SUFFERED_REASONS = ("reclaim", "priority", "capacity_lost")
CAUSED_REASONS = ("reclaim", "priority")
POLICY_KEYS = (
    "share_edits",
    "exceptions_filed",
    "exceptions_approved",
    "exceptions_rejected",
    "exceptions_expired",
    "exceptions_withdrawn",
    "priority_changes",
)
CHANGE_REQUEST_KEYS = ("filed", "approved", "rejected", "withdrawn")
"""``policy_changes.change_requests``: audit entries of type ``change_requests.<key>``."""
GROUP_BY = ("share", "team")


@dataclass(frozen=True)
class Recording:
    """What signals are computed from.

    ``audit``: policy-change entries ``{"at", "type", "share", "team"}`` with ``type`` one
    of :data:`POLICY_KEYS` or ``change_requests.<key>`` (:data:`CHANGE_REQUEST_KEYS`) and
    ``at`` in the recording's time unit; ``None`` when the
    recording carries none (a history file), which makes ``policy_changes`` null.
    ``end``: the end of the recording E in its time unit (default ``until`` + 1, or one
    unit past the last time the recording mentions).
    ``decisions``: the decisions opened by retry exhaustion ``{"share", "opened", "due",
    "decided"}`` (``decided`` null while open; times in the recording's unit), for the
    ``decisions`` signal; ``None`` when the recording carries none, which makes it null.
    """

    scenario: Mapping[str, Any]
    events: Sequence[Mapping[str, Any]]
    teams: Mapping[str, str]
    audit: Sequence[Mapping[str, Any]] | None = None
    end: int | None = None
    decisions: Sequence[Mapping[str, Any]] | None = None
    # ``certification_drift``: per job naming a workload with certified configurations,
    # {"workload": name, "configurations": {"ml.g5.xlarge x2": certified run time}}.
    certified: Mapping[str, Mapping[str, Any]] | None = None


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest rank: the value at 1-based rank ceil(pct * N / 100) of the sorted values."""
    return _ranked(sorted(values), pct)


def _ranked(ordered: Sequence[float], pct: float) -> float | None:
    """``percentile`` of values already sorted ascending."""
    if not ordered:
        return None
    rank = max(1, math.ceil(pct * len(ordered) / 100))
    return ordered[rank - 1]


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else num / den


def time_unit(scenario: Mapping[str, Any]) -> int:
    """Time units per second of a scenario (1000 for ``"time_unit": "ms"``)."""
    return 1000 if scenario.get("time_unit") == "ms" else 1


def recording_end(recording: Recording) -> int:
    """E: the end of the recording in its time unit."""
    if recording.end is not None:
        return recording.end
    until = recording.scenario.get("until")
    if until is not None:
        return int(until) + 1
    times = [int(e["at"]) for e in recording.events]
    times += [int(j["submit_at"]) for j in recording.scenario.get("jobs") or []]
    times += [int(a["at"]) for a in recording.scenario.get("actions") or []]
    return (max(times) if times else 0) + 1


_NEVER = 1 << 62  # the "since" of an accumulator never flushed: every span from it is empty


class _Type:
    """One instance type: its capacity, total usage, and the idle-lendable reading (the
    idle count and the shares with a pending job that fits it), each since ``since``.
    Sets of shares are bit masks (a bit per share, ``_Cell.bit``): the fitting shares
    are read at every instant, and or-ing a few masks costs less than building a set."""

    __slots__ = (
        "by_low",
        "cap_since",
        "capacity",
        "fitting",
        "idle",
        "labels",
        "limited",
        "memo",
        "name",
        "since",
        "total",
    )

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self.cap_since = 0
        self.total = 0
        self.idle = 0
        self.fitting = 0  # the shares fitting ``idle``
        self.since = 0
        self.by_low: dict[int, int] = {}  # smallest pending count -> the shares with it
        self.limited = 0  # the shares with a limit on the type
        self.memo: dict[int, int] = {}  # idle count -> the fitting shares
        self.labels: dict[int, str] = {}  # count -> "<type> x<count>" (runtime_by_choice)


class _Cell:
    """One (share, type): the share's usage of the type with its lazily flushed integrals,
    its limit, and its pending jobs' counts on the type ({count: jobs}) with their
    minimum (``low``, None when none is pending)."""

    __slots__ = (
        "bit",
        "counts",
        "i_borrowed",
        "i_own",
        "i_usage",
        "limit",
        "limited",
        "low",
        "share",
        "since",
        "type",
        "usage",
    )

    def __init__(self, share: str, bit: int, kind: _Type, limits: Mapping[str, Any]) -> None:
        self.share = share
        self.bit = bit  # the share's bit in the type's masks
        self.type = kind
        self.usage = 0
        self.since = _NEVER
        self.i_usage = 0.0
        self.i_own = 0.0
        self.i_borrowed = 0.0
        self.counts: dict[int, int] = {}
        self.low: int | None = None
        self.limited = False
        self.limit = 0
        self.set_limits(limits)

    def set_limits(self, limits: Mapping[str, Any]) -> None:
        kind = self.type
        self.limited = kind.name in limits  # a limit of 0 counts
        self.limit = int(limits.get(kind.name, 0))
        kind.limited = kind.limited | self.bit if self.limited else kind.limited & ~self.bit

    def set_low(self, low: int | None) -> None:
        """The smallest count of the share's pending jobs on the type is now ``low``."""
        by_low, bit = self.type.by_low, self.bit
        if self.low is not None:
            left = by_low[self.low] & ~bit
            if left:
                by_low[self.low] = left
            else:
                del by_low[self.low]
        if low is not None:
            by_low[low] = by_low.get(low, 0) | bit
        self.low = low


class _Shape:
    """The on-demand preferences (cell, count) shared by jobs of one share, with how many
    of those jobs are pending: the cells' pending counts change only when that number
    goes from 0 to 1 or back, so most jobs entering or leaving the queue cost one step."""

    __slots__ = ("pending", "prefs")

    def __init__(self, prefs: tuple[tuple[_Cell, int], ...]) -> None:
        self.prefs = prefs
        self.pending = 0


class _Job:
    __slots__ = (
        "admissions",
        "duration",
        "ever_borrowed",
        "first_admitted",
        "first_plan",
        "last_event",
        "last_preempted_at",
        "last_run_start",
        "on_plan",
        "pending",
        "preemptions",
        "row",
        "run",
        "shape",
        "share",
        "shown",
        "submit",
        "terminal",
    )

    def __init__(
        self,
        raw: Mapping[str, Any],
        rows: Mapping[str, dict[str, _Cell]],
        shaped: tuple[_Shape, str | None],
    ) -> None:
        self.share: str = raw["share"]
        self.row = rows[self.share]  # the share's cells by type name
        self.submit: int = int(raw["submit_at"])
        # None: no declared work, only expected run times per preference (the export
        # leaves it out so they decide); it runs until its run completes.
        self.duration: float | None = raw.get("duration")
        self.shape, self.first_plan = shaped
        self.on_plan: str | None = None
        self.first_admitted = False
        self.pending = False
        self.shown = False  # whether its shape counts it pending (:meth:`_Pass.settle`)
        self.terminal = False
        self.preemptions = 0
        self.admissions = 0
        self.ever_borrowed = False
        self.run: tuple[_Cell, int] | None = None
        self.last_run_start = 0
        self.last_event = ""
        self.last_preempted_at = 0


def _shaped(
    raw: Mapping[str, Any],
    row: Mapping[str, _Cell],
    shapes: dict[tuple[str, tuple[tuple[str, int], ...]], _Shape],
) -> tuple[_Shape, str | None]:
    """A job's on-demand preferences as the shape shared by its share's jobs that have
    the same, and the plan its first preference names."""
    common = raw.get("count")
    # On-demand preferences only: a plan preference draws on its plan's own pool
    # (docs/scheduling.md#capacity-plans), never on the idle capacity that
    # idle_lendable_seconds measures.
    key = (
        raw["share"],
        tuple(
            [
                (p["instance_type"], int(p.get("count", common) if common is None else common))
                for p in raw["preferences"]
                if not p.get("plan")
            ]
        ),
    )
    shape = shapes.get(key)
    if shape is None:
        shape = shapes[key] = _Shape(tuple([(row[t], n) for t, n in key[1]]))
    first = raw["preferences"][0] if raw["preferences"] else {}
    return shape, first.get("plan") or None


class _Collector:
    """Per-share lists and counts of the event figures (groups are unions of shares)."""

    def __init__(self) -> None:
        self.finished: Counter[str] = Counter()
        self.finished_preemptions = 0
        self.wait: list[tuple[float, bool]] = []
        self.turnaround: list[tuple[float, bool]] = []
        self.suffered: Counter[str] = Counter()
        self.caused: Counter[str] = Counter()
        self.lost_work = 0.0
        self.completed_work = 0.0
        self.restart: list[float] = []
        self.first_pref: list[tuple[int, float]] = []
        self.timed_out = 0
        self.runtime: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.policy: Counter[str] = Counter()
        self.plan_first: list[bool] = []
        # the values of the percentiles, each list sorted once (:meth:`rank`)
        self.ranked: dict[str, list[float]] = {}
        self.pref_waits: dict[int, list[float]] = {}
        self.runtimes: dict[str, tuple[list[float], list[float]]] = {}

    def rank(self) -> None:
        """Sort each list of values a percentile reads, once: every group the share is in
        reads them, and a group of several shares sorts the union of their sorted lists,
        which costs about a merge."""
        ranked = self.ranked
        ranked["wait.all"] = sorted([w for w, _ in self.wait])
        ranked["wait.entitled"] = sorted([w for w, b in self.wait if not b])
        ranked["wait.borrowing"] = sorted([w for w, b in self.wait if b])
        ranked["turnaround.all"] = sorted([t for t, _ in self.turnaround])
        ranked["turnaround.only_own"] = sorted([t for t, own in self.turnaround if own])
        ranked["turnaround.borrowed"] = sorted([t for t, own in self.turnaround if not own])
        ranked["restart"] = sorted(self.restart)
        by_pref: dict[int, list[float]] = defaultdict(list)
        for index, wait in self.first_pref:
            by_pref[index].append(wait)
        self.pref_waits = {index: sorted(waits) for index, waits in by_pref.items()}
        self.runtimes = {
            label: (sorted([r for r, _ in rows]), sorted([c for _, c in rows]))
            for label, rows in self.runtime.items()
        }


def _union(parts: list[list[float]]) -> list[float]:
    """The sorted union of sorted lists (one list as it is)."""
    if len(parts) == 1:
        return parts[0]
    return sorted([value for part in parts for value in part])


class _Integrals:
    """Lazily flushed integrals over the clipped window ``[lo, hi)``."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo = lo
        self.hi = hi

    def span(self, since: int, until: int) -> int:
        return max(0, min(until, self.hi) - max(since, self.lo))


def compute(
    recording: Recording,
    start: int,
    stop: int,
    *,
    group_by: str = "share",
) -> dict[str, Any]:
    """Every signal of docs/signals.md for the queue and per share or team, over ``[start, stop)``
    (in the recording's time unit). Times in the answer are seconds, work is
    work-seconds at speed 1.0.

    The pass allocates a few objects per job and event and frees none of them until it
    ends, so the cyclic garbage collector is paused meanwhile: with a large recording in
    memory, its full collections otherwise cost more than the pass itself."""
    with gc_paused():
        return _compute(recording, start, stop, group_by=group_by)


def _compute(
    recording: Recording,
    start: int,
    stop: int,
    *,
    group_by: str,
) -> dict[str, Any]:
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}")
    state = _Pass(recording, start, stop)
    changes, events = _timeline(recording, state.jobs)
    state.replay(events, changes)
    state.count_policy(recording.audit)
    return _Answer(recording, state, group_by).build()


def _timeline(
    recording: Recording, jobs: Mapping[str, _Job]
) -> tuple[list[tuple[int, int, int, Any]], list[Mapping[str, Any]]]:
    """The timeline: actions and submissions (``changes``, to be applied before the events
    of the same instant) and the events in time order. Events come in time order (the
    runner's output and the export are); the changes and submissions are sorted apart and
    merged in, which costs less than sorting it all."""
    changes: list[tuple[int, int, int, Any]] = [
        (int(action["at"]), 0, index, action)
        for index, action in enumerate(recording.scenario.get("actions") or [])
        if action["type"] in ("set_capacity", "set_share", "set_plan")
    ]
    changes += [(job.submit, 1, index, job) for index, job in enumerate(jobs.values())]
    changes.sort()  # (at, kind, index) is unique: the items are never compared
    events = list(recording.events)
    if any(events[i]["at"] > events[i + 1]["at"] for i in range(len(events) - 1)):
        events.sort(key=lambda e: e["at"])  # stable: the order within an instant stays
    return changes, events


class _Pass:
    """The state of the one pass over a recording's timeline: cells, types, jobs and
    plans with their lazily flushed integrals, and the per-share collectors of the event
    figures. ``replay`` walks the timeline; the other methods are its steps."""

    def __init__(self, recording: Recording, start: int, stop: int) -> None:
        scenario = recording.scenario
        self.start = start
        self.stop = stop
        self.unit = time_unit(scenario)
        self.end = recording_end(recording)
        self.win = _Integrals(start, min(stop, self.end))
        self.hi = self.win.hi
        types = scenario["instance_types"]
        self.prices = {t["name"]: float(t.get("hourly_price", 0) or 0) for t in types}
        self.speeds = {t["name"]: float(t.get("speed", 1.0) or 1.0) for t in types}
        self.type_names = [t["name"] for t in types]
        self.kinds = {t["name"]: _Type(t["name"], int(t["capacity"])) for t in types}
        self.limits = {s["name"]: dict(s["limits"]) for s in scenario["shares"]}
        self.share_names = [s["name"] for s in scenario["shares"]]
        # One cell per (share, type), reached from a job through its share's row.
        kinds, type_names = self.kinds, self.type_names
        rows = {
            s: {t: _Cell(s, 1 << i, kinds[t], self.limits[s]) for t in type_names}
            for i, s in enumerate(self.share_names)
        }
        for raw in scenario["jobs"]:  # a job of a share the scenario no longer lists
            if raw["share"] not in rows:
                bit = 1 << len(rows)
                rows[raw["share"]] = {t: _Cell(raw["share"], bit, kinds[t], {}) for t in type_names}
        self.rows = rows
        self.bits = list(rows)  # the share of each bit
        self.cells = [cell for row in rows.values() for cell in row.values()]
        self.jobs = self._jobs(scenario["jobs"], rows)
        self.plans = _Plans(scenario.get("plans") or [], self.win)
        self.i_capacity: dict[str, float] = defaultdict(float)
        # idle lendable, per type: intervals counted once for a group, so groups are
        # flushed by the set of shares that had a fitting pending job
        self.i_idle_sets: dict[tuple[str, int], float] = defaultdict(float)
        self.dirty: set[_Type] = set()  # types to read again at the end of the instant
        # jobs that became pending or stopped being so in the instant (:meth:`settle`)
        self.touched: list[_Job] = []
        # types whose smallest pending counts (or the shares' limits) changed since their
        # last reading: only then can the fitting shares differ at an unchanged idle count
        self.changed: set[_Type] = set()
        self.per_share: dict[str, _Collector] = {s: _Collector() for s in self.share_names}
        self.current: int | None = None  # the instant being applied

    @staticmethod
    def _jobs(
        raws: Iterable[Mapping[str, Any]], rows: Mapping[str, dict[str, _Cell]]
    ) -> dict[str, _Job]:
        """The jobs by id. Jobs given the same list of preferences (the live recording
        shares one list between the jobs submitted alike) are shaped once: the lists
        are alive for the whole pass, so their identities stay distinct."""
        shapes: dict[tuple[str, tuple[tuple[str, int], ...]], _Shape] = {}
        seen: dict[tuple[str, int, Any], tuple[_Shape, str | None]] = {}
        jobs = {}
        for raw in raws:
            key = (raw["share"], id(raw["preferences"]), raw.get("count"))
            shaped = seen.get(key)
            if shaped is None:
                shaped = seen[key] = _shaped(raw, rows[raw["share"]], shapes)
            jobs[str(raw["id"])] = _Job(raw, rows, shaped)
        return jobs

    # ---- the walk
    def replay(self, events: Sequence[Mapping[str, Any]], changes: Sequence[Any]) -> None:
        """Apply the changes and events in time order (changes first within an instant),
        then close every accumulator at E.

        Long because the steps every event and submission takes (entering its instant, a
        submission, an admission or the end of a run with the flush of its cell) are
        written out in the loop rather than called, with the pass's state in locals:
        the loop runs once per event and per job, and those calls and attribute lookups
        were a fifth of the pass's cost. The rarer steps (an action, a preemption or the end of a
        job in the window, a reading at the end of an instant) stay methods."""
        total = len(changes)
        next_change = changes[0][0] if changes else _NEVER
        c = 0
        jobs, per_share, dirty, plans = self.jobs, self.per_share, self.dirty, self.plans
        start, stop, hi, unit = self.start, self.stop, self.hi, self.unit
        end_instant, settle = self.end_instant, self.settle
        apply_change, preempted, finished = self.apply_change, self.preempted, self.finished
        changed, touched = self.changed, self.touched
        touch = touched.append
        current = self.current
        moved: _Cell | None = None  # the cell whose usage the event changes, by ``delta``
        delta = 0
        for event in events:
            at = event["at"]
            while next_change <= at:  # the submissions and actions up to this instant
                item = changes[c][3]
                if next_change != current:
                    if touched:
                        settle()
                    if current is not None and (dirty or changed):
                        end_instant(current)
                    current = self.current = next_change
                if changes[c][1] == 1:  # a submission: the job is pending (set_pending)
                    if (
                        not item.pending
                        and not item.terminal
                        and not item.first_admitted
                        and item.admissions == 0
                    ):
                        item.pending = True
                        touch(item)
                else:
                    apply_change(next_change, item)
                c += 1
                next_change = changes[c][0] if c < total else _NEVER
            if at != current:
                if touched:
                    settle()
                if current is not None and (dirty or changed):
                    end_instant(current)  # (nothing to read again otherwise)
                current = self.current = at
            raw_id = event["job"]
            job = jobs[raw_id if raw_id.__class__ is str else str(raw_id)]
            etype = event["type"]
            if etype == "admitted":
                count = int(event["count"])
                cell = job.row[event["instance_type"]]
                plan = event.get("plan") or None
                if plan is None:
                    moved, delta = cell, count
                else:
                    # a plan's pool: apart from usage(S, T) and T's total
                    # (docs/scheduling.md#capacity-plans)
                    plans.add_usage(plan, count, at)
                job.on_plan = plan
                if job.pending:  # no longer (set_pending)
                    job.pending = False
                    touch(job)
                borrowed = int(event.get("borrowed") or 0)
                if borrowed > 0:
                    job.ever_borrowed = True
                if start <= at < stop:
                    col = per_share[job.share]
                    if not job.first_admitted:
                        if job.first_plan is not None:
                            col.plan_first.append(plan == job.first_plan)
                        wait = (at - job.submit) / unit
                        col.wait.append((wait, borrowed > 0))
                        col.first_pref.append((int(event.get("preference") or 0), wait))
                    if job.last_event == "preempted":
                        col.restart.append((at - job.last_preempted_at) / unit)
                job.first_admitted = True
                job.admissions += 1
                job.run = (cell, count)
                job.last_run_start = at
            elif etype in RUN_ENDS or etype == "timed_out":
                run = job.run
                if run is not None and etype in RUN_ENDS:  # the run's release (stop_run)
                    if job.on_plan is not None:
                        plans.add_usage(job.on_plan, -run[1], at)
                        job.on_plan = None
                    else:
                        moved, delta = run[0], -run[1]
                    job.run = None
                if etype == "preempted":
                    preempted(job, per_share[job.share], event, at)
                else:
                    finished(job, per_share[job.share], etype, run, at)
            job.last_event = etype
            if moved is not None:
                # the cell's integrals up to now (flush), then its usage: nothing above
                # reads them
                since = moved.since
                dt = (at if at < hi else hi) - (since if since > start else start)
                moved.since = at
                usage = moved.usage
                if dt > 0 and usage:
                    lim = moved.limit
                    moved.i_usage += usage * dt
                    if usage > lim:
                        moved.i_own += lim * dt
                        moved.i_borrowed += (usage - lim) * dt
                    else:
                        moved.i_own += usage * dt
                moved.usage = usage + delta
                kind = moved.type
                kind.total += delta
                dirty.add(kind)
                moved = None
        for change in changes[c:]:
            self.apply_timed(change)
        if self.current is not None:
            self.end_instant(self.current)
        self.close()

    def move_to(self, at: int) -> None:
        """Enter instant ``at``, ending the one before it."""
        if at != self.current:
            if self.touched:
                self.settle()
            if self.current is not None and (self.dirty or self.changed):
                self.end_instant(self.current)  # (nothing to read again otherwise)
            self.current = at

    def apply_timed(self, change: tuple[int, int, int, Any]) -> None:
        """A submission (kind 1) or an action (kind 0) at its instant."""
        at, kind, _, item = change
        self.move_to(at)
        if kind == 1:
            if not item.terminal and not item.first_admitted and item.admissions == 0:
                self.set_pending(item, True)
        else:
            self.apply_change(at, item)

    def close(self) -> None:
        """Close every accumulator at E."""
        end = self.end
        for cell in self.cells:
            self.flush(cell, end)
        for type_name in self.type_names:
            self.flush_capacity(self.kinds[type_name], end)
        self.dirty.update(self.kinds.values())
        self.end_instant(end)
        self.plans.close(end)

    def count_policy(self, audit: Sequence[Mapping[str, Any]] | None) -> None:
        """Count each share's audit entries in the window (its ``policy_changes``)."""
        for entry in audit or []:
            at = int(entry["at"])
            if self.start <= at < self.stop and entry.get("share") in self.per_share:
                self.per_share[entry["share"]].policy[entry["type"]] += 1

    # ---- the events
    def preempted(self, job: _Job, col: _Collector, event: Mapping[str, Any], at: int) -> None:
        job.preemptions += 1
        job.last_preempted_at = at
        self.set_pending(job, True)
        if self.start <= at < self.stop:
            reason = event.get("reason") or ""
            col.suffered[reason] += 1
            col.lost_work += float(event.get("lost_work") or 0) / self.unit
            by = event.get("by")
            if by is not None and str(by) in self.jobs:
                self.per_share[self.jobs[str(by)].share].caused[reason] += 1

    def finished(
        self, job: _Job, col: _Collector, etype: str, run: tuple[_Cell, int] | None, at: int
    ) -> None:
        job.terminal = True
        self.set_pending(job, False)
        if not self.start <= at < self.stop:
            return
        unit = self.unit
        col.finished[FINAL_STATES[etype]] += 1
        col.finished_preemptions += job.preemptions
        if etype == "timed_out":
            col.timed_out += 1
        if etype != "completed":
            return
        col.turnaround.append(((at - job.submit) / unit, not job.ever_borrowed))
        if job.duration is not None:
            col.completed_work += float(job.duration) / unit
        elif run is not None:  # no declared work: what its last run did
            speed = self.speeds.get(run[0].type.name, 1.0)
            col.completed_work += (at - job.last_run_start) * speed / unit
        if run is not None:
            kind, count = run[0].type, run[1]
            label = kind.labels.get(count)
            if label is None:  # (made once per type and count)
                label = kind.labels[count] = f"{kind.name} x{count}"
            runtime = (at - job.last_run_start) / unit
            cost = count * runtime * self.prices.get(kind.name, 0.0) / 3600
            col.runtime[label].append((runtime, cost))

    def apply_change(self, at: int, item: Mapping[str, Any]) -> None:
        if item["type"] == "set_plan":
            self.plans.set_count(item["plan"], int(item["count"]), at)
        elif item["type"] == "set_capacity":
            kind_of = self.kinds[item["instance_type"]]
            self.flush_capacity(kind_of, at)
            kind_of.capacity = int(item["capacity"])
            self.dirty.add(kind_of)
        elif "limits" in item:
            share = item["share"]
            for cell in self.rows[share].values():
                self.flush(cell, at)
            self.limits[share] = dict(item["limits"])
            for cell in self.rows[share].values():
                cell.set_limits(self.limits[share])
            self.dirty.update(self.kinds.values())
            self.changed.update(self.kinds.values())

    # ---- the accumulators
    def flush(self, cell: _Cell, now: int) -> None:
        dt = min(now, self.hi) - max(cell.since, self.start)
        cell.since = now
        if dt > 0:
            u = cell.usage
            if u:
                lim = cell.limit
                cell.i_usage += u * dt
                cell.i_own += min(u, lim) * dt
                cell.i_borrowed += max(0, u - lim) * dt

    def flush_capacity(self, kind: _Type, now: int) -> None:
        dt = self.win.span(kind.cap_since, now)
        kind.cap_since = now
        if dt:
            self.i_capacity[kind.name] += kind.capacity * dt

    def set_pending(self, job: _Job, on: bool) -> None:
        """The job is pending (``on``) or no longer; its shape counts it at the end of the
        instant (:meth:`settle`)."""
        if job.pending != on:
            job.pending = on
            self.touched.append(job)

    def settle(self) -> None:
        """Count the jobs touched in the instant as pending in their shapes, or no longer,
        as they now are. The reading at the end of the instant is the only reader of the
        shapes' counts, so a job pending only within the instant (submitted and admitted
        at once, as nearly half the jobs of a busy queue are) costs its shape nothing.
        A type needs a fresh idle-lendable reading only when a share's smallest pending
        count on it changes (the reading depends on nothing else of the pending jobs)."""
        for job in self.touched:
            on = job.pending
            if on is job.shown:
                continue
            job.shown = on
            shape = job.shape
            if on:
                shape.pending += 1
                if shape.pending == 1:
                    self.shape_pending(shape, True)
            else:
                shape.pending -= 1
                if not shape.pending:
                    self.shape_pending(shape, False)
        self.touched.clear()

    def shape_pending(self, shape: _Shape, on: bool) -> None:
        """The first of the shape's jobs is now pending (``on``), or the last no longer:
        its cells' pending counts change."""
        changed = self.changed
        for cell, n in shape.prefs:
            counts = cell.counts
            if on:
                counts[n] = counts.get(n, 0) + 1
                low = cell.low
                if low is None or n < low:
                    cell.set_low(n)
                    changed.add(cell.type)
            else:
                left = counts[n] - 1
                if left > 0:
                    counts[n] = left
                    continue
                del counts[n]
                if not counts:
                    cell.set_low(None)
                    changed.add(cell.type)
                elif cell.low == n:
                    cell.set_low(min(counts))
                    changed.add(cell.type)

    def end_instant(self, now: int) -> None:
        """Integrate each touched type's idle-lendable reading up to ``now`` and read it
        again. The fitting shares at an idle count are remembered until the smallest
        pending counts change: in a deep queue they rarely do, and idle counts repeat."""
        if self.touched:
            self.settle()
        dirty, changed = self.dirty, self.changed
        if changed:
            dirty.update(changed)
        hi, start = self.hi, self.start
        top = now if now < hi else hi
        for kind in dirty:
            idle = kind.idle
            if idle > 0 and kind.fitting:
                since = kind.since
                dt = top - (since if since > start else start)
                if dt > 0:
                    self.i_idle_sets[(kind.name, kind.fitting)] += idle * dt
            kind.since = now
            new_idle = kind.capacity - kind.total
            if kind in changed:
                kind.memo.clear()
            elif new_idle == idle:
                continue  # the same idle count and the same pending counts: the same reading
            kind.idle = new_idle
            fitting = kind.memo.get(new_idle)
            if fitting is None:
                fitting = self.fitting(kind, new_idle)
                kind.memo[new_idle] = fitting
            kind.fitting = fitting
        dirty.clear()
        changed.clear()

    def fitting(self, kind: _Type, idle: int) -> int:
        """The shares with a pending job that fits ``idle`` instances of ``kind`` and a
        limit on it (a mask)."""
        if idle <= 0:
            return 0
        fits = 0
        for low, shares in kind.by_low.items():
            if low <= idle:
                fits |= shares
        return fits & kind.limited

    def idle_sets(self) -> dict[tuple[str, frozenset[str]], float]:
        """The idle-lendable integrals by type and set of fitting shares, in the order
        they were first counted."""
        bits = self.bits
        names: dict[int, frozenset[str]] = {}
        out: dict[tuple[str, frozenset[str]], float] = {}
        for (type_name, mask), value in self.i_idle_sets.items():
            shares = names.get(mask)
            if shares is None:
                shares = names[mask] = frozenset(
                    [share for i, share in enumerate(bits) if mask >> i & 1]
                )
            out[(type_name, shares)] = value
        return out


class _Answer:
    """The answer of ``compute`` from a finished pass: the queue's figures and each
    group's (a share, or a team's shares)."""

    def __init__(self, recording: Recording, state: _Pass, group_by: str) -> None:
        self.recording = recording
        self.state = state
        self.group_by = group_by
        cells = state.cells
        self.integrals: dict[str, Mapping[Any, float]] = {
            "usage": {(c.share, c.type.name): c.i_usage for c in cells},
            "own": {(c.share, c.type.name): c.i_own for c in cells},
            "borrowed": {(c.share, c.type.name): c.i_borrowed for c in cells},
            "capacity": state.i_capacity,
            "idle_sets": state.idle_sets(),
        }
        self.audit_teams: Counter[tuple[str, str]] = Counter()
        self.audit_all: Counter[str] = Counter()
        for entry in recording.audit or []:
            if state.start <= int(entry["at"]) < state.stop:
                self.audit_all[entry["type"]] += 1
                if entry.get("team") is not None:
                    self.audit_teams[(entry["team"], entry["type"])] += 1
        self.outcomes = deadline_outcomes(recording, state.start, state.stop)
        self.drift_runs = certified_runs(recording, state.start, state.stop)
        for col in state.per_share.values():
            col.rank()

    def groups(self) -> dict[str, list[str]]:
        share_names = self.state.share_names
        if self.group_by == "share":
            return {s: [s] for s in share_names}
        groups: dict[str, list[str]] = {}
        for s in share_names:
            groups.setdefault(self.recording.teams.get(s, s), []).append(s)
        return groups

    def build(self) -> dict[str, Any]:
        state, group_by = self.state, self.group_by
        answer_groups = []
        for name, members in self.groups().items():
            row: dict[str, Any] = {group_by: name, "shares": members}
            row.update(self.figures(members, team=name if group_by == "team" else None))
            answer_groups.append(row)
        unit = state.unit
        return {
            "window": {
                "from": state.start / unit,
                "to": state.stop / unit,
                "end": state.end / unit,
            },
            "queue": self.figures(state.share_names, whole=True),
            "groups": answer_groups,
        }

    def figures(
        self, members: list[str], team: str | None = None, whole: bool = False
    ) -> dict[str, Any]:
        state = self.state
        out = _figures(
            [state.per_share[s] for s in members],
            members,
            state.type_names,
            state.prices,
            self.integrals,
            state.unit,
        )
        state.plans.figures(out, members, state.unit)
        out["deadlines"] = deadlines_figure(self.outcomes, members)
        out["decisions"] = decisions_figure(
            self.recording, members, state.start, min(state.stop, state.end), state.unit
        )
        out["certification_drift"] = certification_drift_figure(self.drift_runs, members)
        out["policy_changes"] = self.policy(members, team, whole)
        return out

    def policy(self, members: list[str], team: str | None, whole: bool) -> dict[str, Any] | None:
        if self.recording.audit is None:
            return None

        def count(key: str) -> int:
            if whole:
                return self.audit_all[key]
            if team is not None:
                return self.audit_teams[(team, key)]
            return sum(self.state.per_share[s].policy[key] for s in members)

        out: dict[str, Any] = {k: count(k) for k in POLICY_KEYS}
        out["change_requests"] = {k: count(f"change_requests.{k}") for k in CHANGE_REQUEST_KEYS}
        return out


class _Plans:
    """Capacity plans (docs/scheduling.md#capacity-plans) of a recording: each plan's usage and
    count integrated over its active time inside the window, for ``plan_utilization`` and the plan's
    cost
    (its whole active time x count x price, used or not). Counts change by ``set_plan``."""

    def __init__(self, raw: Iterable[Mapping[str, Any]], win: _Integrals) -> None:
        self.win = win
        self.rows = {str(p["name"]): p for p in raw}
        self.count = {name: int(p.get("count", 0)) for name, p in self.rows.items()}
        self.usage = dict.fromkeys(self.rows, 0)
        self.since = dict.fromkeys(self.rows, 0)
        self.i_usage = dict.fromkeys(self.rows, 0.0)
        self.i_count = dict.fromkeys(self.rows, 0.0)
        self.first: dict[str, list[bool]] = {}

    def _flush(self, name: str, now: int) -> None:
        plan = self.rows[name]
        lo = max(self.since[name], int(plan["start"]))
        hi = min(now, int(plan["end"]))
        self.since[name] = now
        dt = self.win.span(lo, hi) if hi > lo else 0
        if dt:
            self.i_usage[name] += self.usage[name] * dt
            self.i_count[name] += self.count[name] * dt

    def add_usage(self, name: str, delta: int, now: int) -> None:
        if name in self.rows:
            self._flush(name, now)
            self.usage[name] += delta

    def set_count(self, name: str, count: int, now: int) -> None:
        if name in self.rows:
            self._flush(name, now)
            self.count[name] = count

    def close(self, end: int) -> None:
        for name in self.rows:
            self._flush(name, end)

    def figures(self, out: dict[str, Any], members: list[str], unit: int) -> None:
        """Add ``plan_utilization`` and the plans' cost to ``out``
        (the figures of a group made of the shares ``members``)."""
        owned = [n for n, p in self.rows.items() if p.get("share") in members]
        out["plan_utilization"] = {n: _ratio(self.i_usage[n], self.i_count[n]) for n in owned}
        cost = out["cost"]
        for name in owned:
            price = float(self.rows[name].get("hourly_price", 0) or 0)
            amount = self.i_count[name] / unit * price / 3600
            cost[name] = {"own": amount, "borrowed": 0.0, "total": amount}
            cost["total"]["own"] += amount
            cost["total"]["total"] += amount


def _figures(
    cols: list[_Collector],
    members: list[str],
    type_names: list[str],
    prices: Mapping[str, float],
    integrals: Mapping[str, Mapping[Any, float]],
    unit: int,
) -> dict[str, Any]:
    """Long because the answer is one literal in the order of docs/signals.md: split, its shape
    would be in pieces."""
    finished: Counter[str] = Counter()
    for col in cols:
        finished.update(col.finished)
    total_finished = sum(finished.values())

    def ranked(key: str, keys: Iterable[int]) -> dict[str, float | None]:
        ordered = _union([col.ranked[key] for col in cols])
        return {f"p{k}": _ranked(ordered, k) for k in keys}

    suffered: Counter[str] = Counter()
    caused: Counter[str] = Counter()
    for col in cols:
        suffered.update(col.suffered)
        caused.update(col.caused)
    lost_work = sum(col.lost_work for col in cols)
    done_work = sum(col.completed_work for col in cols)
    first = [index for col in cols for index, _ in col.first_pref]
    pref_parts: dict[int, list[list[float]]] = defaultdict(list)
    runtime_parts: dict[str, list[tuple[list[float], list[float]]]] = defaultdict(list)
    for col in cols:
        for index, waits in col.pref_waits.items():
            pref_parts[index].append(waits)
        for label, rows in col.runtimes.items():
            runtime_parts[label].append(rows)
    by_pref = {index: _union(parts) for index, parts in pref_parts.items()}
    runtime = {
        label: (_union([r for r, _ in parts]), _union([c for _, c in parts]))
        for label, parts in runtime_parts.items()
    }

    seconds: dict[str, Any] = {}
    cost: dict[str, Any] = {}
    utilization: dict[str, Any] = {}
    idle_lendable: dict[str, float] = {}
    cost_total = {"own": 0.0, "borrowed": 0.0, "total": 0.0}
    member_set = frozenset(members)
    for type_name in type_names:
        used = sum(integrals["usage"].get((s, type_name), 0.0) for s in members) / unit
        own = sum(integrals["own"].get((s, type_name), 0.0) for s in members) / unit
        borrowed = sum(integrals["borrowed"].get((s, type_name), 0.0) for s in members) / unit
        cap = integrals["capacity"].get(type_name, 0.0) / unit
        seconds[type_name] = {"own": own, "borrowed": borrowed, "total": used}
        rate = prices.get(type_name, 0.0) / 3600
        row = {"own": own * rate, "borrowed": borrowed * rate, "total": used * rate}
        cost[type_name] = row
        for k in cost_total:
            cost_total[k] += row[k]
        utilization[type_name] = {"all": _ratio(used, cap), "borrowed": _ratio(borrowed, cap)}
        idle_lendable[type_name] = (
            sum(
                value
                for (t, fitting), value in integrals["idle_sets"].items()
                if t == type_name and fitting & member_set
            )
            / unit
        )
    cost["total"] = cost_total

    return {
        "jobs_finished": {
            **{state: finished[state] for state in FINAL_STATES.values()},
            "total": total_finished,
        },
        "wait_to_start": {
            "all": ranked("wait.all", (50, 90, 99)),
            "entitled": ranked("wait.entitled", (50, 90, 99)),
            "borrowing": ranked("wait.borrowing", (50, 90, 99)),
        },
        "turnaround": {
            "all": ranked("turnaround.all", (50, 90, 99)),
            "only_own": ranked("turnaround.only_own", (50, 90, 99)),
            "borrowed": ranked("turnaround.borrowed", (50, 90, 99)),
        },
        "preemptions_suffered": {
            **{r: suffered[r] for r in SUFFERED_REASONS},
            "total": sum(suffered.values()),
        },
        "preemptions_caused": {
            **{r: caused[r] for r in CAUSED_REASONS},
            "total": sum(caused.values()),
        },
        "lost_work": lost_work,
        "goodput": _ratio(done_work, done_work + lost_work),
        "preemptions_per_finished_job": _ratio(
            sum(col.finished_preemptions for col in cols), total_finished
        ),
        "time_to_restart": ranked("restart", (50, 90)),
        "fallback": {
            "by_preference": {str(i): len(by_pref[i]) for i in sorted(by_pref)},
            "wait_to_start_p50": {str(i): _ranked(by_pref[i], 50) for i in sorted(by_pref)},
            "timed_out": sum(col.timed_out for col in cols),
        },
        "fallback_rate": _ratio(sum(1 for i in first if i > 0), len(first)),
        # Of the first admissions (in the window) of jobs whose first preference names a
        # capacity plan, the fraction that started on that plan (docs/scheduling.md#capacity-plans).
        "plan_first_rate": _ratio(
            sum(on for col in cols for on in col.plan_first),
            sum(len(col.plan_first) for col in cols),
        ),
        "runtime_by_choice": {
            label: {
                "jobs": len(runtimes),
                "run_time": {f"p{k}": _ranked(runtimes, k) for k in (50, 90)},
                "cost_p50": _ranked(costs, 50),
            }
            for label, (runtimes, costs) in sorted(runtime.items())
        },
        "instance_seconds": seconds,
        "cost": cost,
        "utilization": utilization,
        "idle_lendable_seconds": idle_lendable,
    }


DEADLINE_OUTCOMES = ("met", "late", "timed_out")


def deadline_outcomes(recording: Recording, start: int, stop: int) -> dict[str, Counter[str]]:
    """Per share, how the jobs with a ``deadline`` whose final event lies in the window
    ``[start, stop)`` ended (docs/signals.md, ``deadlines``): ``met`` completed at or before
    the deadline, ``late`` completed after it, ``timed_out`` timed out for it (reason
    ``deadline``); other endings count in none."""
    deadlines = {
        str(raw["id"]): (raw["share"], raw["deadline"])
        for raw in recording.scenario["jobs"]
        if raw.get("deadline") is not None
    }
    out: dict[str, Counter[str]] = defaultdict(Counter)
    if not deadlines:
        return out
    for event in recording.events:
        kind = event["type"]
        if kind not in FINAL_STATES:
            continue
        found = deadlines.get(str(event["job"]))
        if found is None or not start <= int(event["at"]) < stop:
            continue
        share, deadline = found
        if kind == "completed":
            out[share]["met" if event["at"] <= deadline else "late"] += 1
        elif kind == "timed_out" and event.get("reason") == "deadline":
            out[share]["timed_out"] += 1
    return out


def certified_runs(
    recording: Recording, start: int, stop: int
) -> dict[str, dict[tuple[str, str], list[float]]]:
    """Per share, per (workload, configuration): the ratios actual / certified run time
    of the runs completed in ``[start, stop)`` on a certified configuration of their job's
    workload (actual: the last admission to the completion)."""
    out: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    certified = recording.certified or {}
    if not certified:
        return out
    shares = {str(raw["id"]): raw["share"] for raw in recording.scenario["jobs"]}
    admitted: dict[str, Mapping[str, Any]] = {}
    for event in recording.events:
        job = str(event["job"])
        if event["type"] == "admitted":
            admitted[job] = event
            continue
        if event["type"] != "completed" or job not in certified or job not in admitted:
            continue
        if not start <= int(event["at"]) < stop:
            continue
        admission = admitted[job]
        name = admission.get("plan") or admission.get("instance_type")
        configuration = (
            f"plan {name} x{admission['count']}"
            if admission.get("plan")
            else f"{name} x{admission['count']}"
        )
        runtime = certified[job]["configurations"].get(configuration)
        if runtime:
            key = (certified[job]["workload"], configuration)
            out[shares[job]][key].append((int(event["at"]) - int(admission["at"])) / runtime)
    return out


def certification_drift_figure(
    runs: Mapping[str, Mapping[tuple[str, str], list[float]]], members: list[str]
) -> list[dict[str, Any]]:
    """``certification_drift`` of a group of shares: per workload and certified
    configuration, {workload, configuration, p50, p90, runs, drifting} of the ratios
    actual / certified run time (scheduler/engine/drift.py)."""
    merged: dict[tuple[str, str], list[float]] = defaultdict(list)
    for share in members:
        for key, ratios in runs.get(share, {}).items():
            merged[key].extend(ratios)
    return [
        {"workload": workload, "configuration": configuration, **drift(ratios, 1.0)}
        for (workload, configuration), ratios in sorted(merged.items())
    ]


def deadlines_figure(outcomes: Mapping[str, Counter[str]], members: list[str]) -> dict[str, Any]:
    """``deadlines`` of a group of shares: {met, late, timed_out, rate}, rate = met /
    (met + late + timed_out) (None when no job counts)."""
    counts = {k: sum(outcomes[s][k] for s in members if s in outcomes) for k in DEADLINE_OUTCOMES}
    return {**counts, "rate": _ratio(counts["met"], sum(counts.values()))}


def decisions_figure(
    recording: Recording, members: list[str], start: int, end: int, unit: float
) -> dict[str, Any] | None:
    """``decisions`` of a group of shares (docs/signals.md): of the decisions of its jobs,
    ``opened`` and ``decided`` in ``[start, end)``; ``overdue``, those whose due time came
    in it before they were decided; ``time_to_decide`` {p50, p90} in seconds, decided
    minus opened, over those decided in it. Null when the recording carries no decisions."""
    if recording.decisions is None:
        return None
    group = set(members)
    opened = decided = overdue = 0
    waits: list[float] = []
    for row in recording.decisions:
        if row.get("share") not in group:
            continue
        at_open, due, at_decide = int(row["opened"]), int(row["due"]), row.get("decided")
        if start <= at_open < end:
            opened += 1
        if at_decide is not None and start <= int(at_decide) < end:
            decided += 1
            waits.append((int(at_decide) - at_open) / unit)
        if start <= due < end and (at_decide is None or int(at_decide) > due):
            overdue += 1
    waits.sort()
    return {
        "opened": opened,
        "decided": decided,
        "overdue": overdue,
        "time_to_decide": {"p50": _ranked(waits, 50), "p90": _ranked(waits, 90)},
    }


def flat_rows(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The answer as a flat table, one row per group (the queue first): nested keys are
    joined with dots (``wait_to_start.all.p50``), for ``?format=csv``."""
    rows = []
    key = "team" if any("team" in g for g in answer["groups"]) else "share"
    for group in [{key: "(queue)", **answer["queue"]}, *answer["groups"]]:
        row: dict[str, Any] = {}
        _flatten("", group, row)
        row.pop("shares", None)
        rows.append(row)
    return rows


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        out[prefix] = " ".join(str(v) for v in value)
    else:
        out[prefix] = value


def file_recording(data: Mapping[str, Any]) -> Recording:
    """The recording of a history file (``{"scenario", "recorded", "teams"}``, and the
    ``decisions`` and ``certified`` an export carries; an older file's ``recorded`` may be
    the bare list of events, and without ``decisions`` that signal is null)."""
    recorded = data["recorded"]
    events = recorded["events"] if isinstance(recorded, Mapping) else recorded
    return Recording(
        data["scenario"],
        events,
        data.get("teams") or {},
        decisions=data.get("decisions"),
        certified=data.get("certified"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m scheduler.signals FILE [--from S] [--to S] [--group-by share|team]
    [--csv]``: the signals of a history file over a window in seconds from the file's
    start (default: the whole file), as JSON or a CSV table."""
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.signals",
        description="The signals of a history file (manage.py export_history) over a window.",
    )
    parser.add_argument("file", help="a history file: {scenario, recorded, teams}")
    parser.add_argument("--from", dest="start", type=float, default=0.0, help="seconds")
    parser.add_argument("--to", dest="stop", type=float, default=None, help="seconds")
    parser.add_argument("--group-by", choices=GROUP_BY, default="share")
    parser.add_argument("--csv", action="store_true", help="a flat table instead of JSON")
    args = parser.parse_args(argv)
    try:
        with open(args.file, encoding="utf-8") as handle:
            recording = file_recording(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{args.file}: not a history file ({exc})", file=sys.stderr)
        return 2
    unit = time_unit(recording.scenario)
    start = round(args.start * unit)
    stop = recording_end(recording) if args.stop is None else round(args.stop * unit)
    if stop <= start:
        print("--to: must be after --from", file=sys.stderr)
        return 2
    answer = compute(recording, start, stop, group_by=args.group_by)
    if args.csv:
        from governance.api.tables import csv_text  # the one CSV writer (formulas neutralised)

        sys.stdout.write(csv_text(flat_rows(answer)))
    else:
        json.dump(answer, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
