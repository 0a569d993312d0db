"""Signals of DESIGN section 8: whether sharing turns idle capacity into finished work
without costing owners their predictable access, computed from a recording.

Plain Python, no Django: the same function serves a live queue (its history export), a
history file and both sides of a what-if. A **recording** is a scenario in section-3 form
(``time_unit`` "ms" or seconds), the events recorded for it in section-3 output form, the
share -> team map, and optionally the audit entries that count as policy changes.

The figures come from one pass over the events in time order. Time-integrated figures
(instance-seconds, cost, utilization, idle lendable capacity) keep one accumulator per
(share, type) and per type that is flushed only when its value changes, so the pass costs
a constant per event whatever the window; each interval takes the state at the end of its
first instant (every change at one instant is applied before the instant's interval
starts counting).

Rules of counting (DESIGN 8): an event is in the window ``[from, to)`` when
``from <= at < to``; integrals run over ``[from, min(to, E))`` where ``E`` is the end of
the recording (``until`` + 1 time unit for a history file, "now" for a live queue).
Percentiles use the nearest rank; an empty set or a zero denominator gives ``None``.
"""

from __future__ import annotations

import gc
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
GROUP_BY = ("share", "team")


@dataclass(frozen=True)
class Recording:
    """What signals are computed from.

    ``audit``: policy-change entries ``{"at", "type", "share", "team"}`` with ``type`` one
    of :data:`POLICY_KEYS` and ``at`` in the recording's time unit; ``None`` when the
    recording carries none (a history file), which makes ``policy_changes`` null.
    ``end``: the end of the recording E in its time unit (default ``until`` + 1, or one
    unit past the last time the recording mentions).
    """

    scenario: Mapping[str, Any]
    events: Sequence[Mapping[str, Any]]
    teams: Mapping[str, str]
    audit: Sequence[Mapping[str, Any]] | None = None
    end: int | None = None


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
        "prefs",
        "run",
        "share",
        "submit",
        "terminal",
    )

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.share: str = raw["share"]
        self.submit: int = int(raw["submit_at"])
        self.duration: float = raw["duration"]
        common = raw.get("count")
        # On-demand preferences only: a plan preference draws on its plan's own pool
        # (DESIGN 10), never on the idle capacity that idle_lendable_seconds measures.
        self.prefs: list[tuple[str, int]] = [
            (p["instance_type"], int(p.get("count", common) if common is None else common))
            for p in raw["preferences"]
            if not p.get("plan")
        ]
        first = raw["preferences"][0] if raw["preferences"] else {}
        self.first_plan: str | None = first.get("plan") or None
        self.on_plan: str | None = None
        self.first_admitted = False
        self.pending = False
        self.terminal = False
        self.preemptions = 0
        self.admissions = 0
        self.ever_borrowed = False
        self.run: tuple[str, int] | None = None
        self.last_run_start = 0
        self.last_event = ""
        self.last_preempted_at = 0


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
    """Every signal of DESIGN 8 for the queue and per share or team, over ``[start, stop)``
    (in the recording's time unit). Times in the answer are seconds, work is
    work-seconds at speed 1.0.

    The pass allocates a few objects per job and event and frees none of them until it
    ends, so the cyclic garbage collector is paused meanwhile: with a large recording in
    memory, its full collections otherwise cost more than the pass itself."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return _compute(recording, start, stop, group_by=group_by)
    finally:
        if paused:
            gc.enable()


def _compute(
    recording: Recording,
    start: int,
    stop: int,
    *,
    group_by: str,
) -> dict[str, Any]:
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}")
    scenario = recording.scenario
    unit = time_unit(scenario)
    end = recording_end(recording)
    win = _Integrals(start, min(stop, end))
    hi = win.hi

    prices = {t["name"]: float(t.get("hourly_price", 0) or 0) for t in scenario["instance_types"]}
    capacity = {t["name"]: int(t["capacity"]) for t in scenario["instance_types"]}
    type_names = [t["name"] for t in scenario["instance_types"]]
    limits = {s["name"]: dict(s["limits"]) for s in scenario["shares"]}
    share_names = [s["name"] for s in scenario["shares"]]
    jobs = {str(raw["id"]): _Job(raw) for raw in scenario["jobs"]}
    plans = _Plans(scenario.get("plans") or [], win)

    # ---- state and its lazily flushed integrals
    usage: dict[tuple[str, str], int] = defaultdict(int)
    since_su: dict[tuple[str, str], int] = {}
    i_usage: dict[tuple[str, str], float] = defaultdict(float)
    i_own: dict[tuple[str, str], float] = defaultdict(float)
    i_borrowed: dict[tuple[str, str], float] = defaultdict(float)
    total_usage: dict[str, int] = defaultdict(int)
    cap_since = dict.fromkeys(type_names, 0)
    i_capacity: dict[str, float] = defaultdict(float)

    def flush_su(key: tuple[str, str], now: int) -> None:
        dt = min(now, hi) - max(since_su.get(key, now), start)
        since_su[key] = now
        if dt > 0:
            u = usage[key]
            if u:
                lim = int(limits[key[0]].get(key[1], 0))
                i_usage[key] += u * dt
                i_own[key] += min(u, lim) * dt
                i_borrowed[key] += max(0, u - lim) * dt

    def flush_capacity(type_name: str, now: int) -> None:
        dt = win.span(cap_since[type_name], now)
        cap_since[type_name] = now
        if dt:
            i_capacity[type_name] += capacity[type_name] * dt

    # pending preference counts per type and share ({count: jobs}), and their minimum
    pend: dict[str, dict[str, dict[int, int]]] = {t: {} for t in type_names}
    pmin: dict[str, dict[str, int]] = {t: {} for t in type_names}
    # idle lendable: per type, the idle count and the shares with a pending job that fits
    empty: frozenset[str] = frozenset()
    idle_state: dict[str, tuple[int, frozenset[str]]] = {t: (0, empty) for t in type_names}
    idle_since = dict.fromkeys(type_names, 0)
    # per type: intervals counted once for a group, so groups are flushed by share set
    i_idle_sets: dict[tuple[str, frozenset[str]], float] = defaultdict(float)
    dirty: set[str] = set()
    # types whose smallest pending counts (or the shares' limits) changed since their last
    # reading: only then can the fitting shares differ at an unchanged idle count
    changed: set[str] = set()

    def set_pending(job: _Job, on: bool) -> None:
        # A type needs a fresh idle-lendable reading only when a share's smallest pending
        # count on it changes (the reading depends on nothing else of the pending jobs).
        if job.pending == on:
            return
        job.pending = on
        share = job.share
        for type_name, n in job.prefs:
            by_share = pend[type_name]
            lows = pmin[type_name]
            counter = by_share.get(share)
            if on:
                if counter is None:
                    counter = by_share[share] = {}
                counter[n] = counter.get(n, 0) + 1
                low = lows.get(share)
                if low is None or n < low:
                    lows[share] = n
                    dirty.add(type_name)
                    changed.add(type_name)
            elif counter is not None:
                left = counter[n] - 1
                if left > 0:
                    counter[n] = left
                else:
                    del counter[n]
                    if not counter:
                        del by_share[share]
                        del lows[share]
                        dirty.add(type_name)
                        changed.add(type_name)
                    elif lows[share] == n:
                        lows[share] = min(counter)
                        dirty.add(type_name)
                        changed.add(type_name)

    # per type: the shares with a limit on it (a limit of 0 counts), kept with the limits
    limited: dict[str, set[str]] = {}

    def index_limits() -> None:
        for type_name in type_names:
            limited[type_name] = {s for s in share_names if type_name in limits[s]}

    index_limits()

    def refresh_idle(type_name: str, now: int) -> None:
        idle, fitting = idle_state[type_name]
        since = idle_since[type_name]
        idle_since[type_name] = now
        if idle > 0 and fitting:
            dt = min(now, hi) - max(since, start)
            if dt > 0:
                i_idle_sets[(type_name, fitting)] += idle * dt
        new_idle = capacity[type_name] - total_usage[type_name]
        if new_idle == idle and type_name not in changed:
            return  # the same idle count and the same pending counts: the same reading
        changed.discard(type_name)
        ok = empty
        if new_idle > 0:
            lows = pmin[type_name]
            if lows:
                lim = limited[type_name]
                ok = frozenset([s for s, low in lows.items() if low <= new_idle and s in lim])
        idle_state[type_name] = (new_idle, ok)

    # ---- the timeline: actions and submissions before the events of the same instant.
    # Events come in time order (the runner's output and the export are); the changes and
    # submissions are sorted apart and merged in, which costs less than sorting it all.
    changes_in: list[tuple[int, int, int, Any]] = [
        (int(action["at"]), 0, index, action)
        for index, action in enumerate(scenario.get("actions") or [])
        if action["type"] in ("set_capacity", "set_share", "set_plan")
    ]
    changes_in += [(job.submit, 1, index, key) for index, (key, job) in enumerate(jobs.items())]
    changes_in.sort()  # (at, kind, index) is unique: the items are never compared
    events = list(recording.events)
    if any(events[i]["at"] > events[i + 1]["at"] for i in range(len(events) - 1)):
        events.sort(key=lambda e: e["at"])  # stable: the order within an instant stays

    def timeline() -> Iterator[tuple[int, int, Any]]:
        pending_changes = len(changes_in)
        i = 0
        for event in events:
            at = event["at"]
            while i < pending_changes and changes_in[i][0] <= at:
                change = changes_in[i]
                yield change[0], change[1], change[3]
                i += 1
            yield at, 2, event
        for change in changes_in[i:]:
            yield change[0], change[1], change[3]

    per_share: dict[str, _Collector] = {s: _Collector() for s in share_names}

    def in_window(at: int) -> bool:
        return start <= at < stop

    def sec(value: float) -> float:
        return value / unit

    current = None
    for at, kind, item in timeline():
        if current is not None and at != current:
            for type_name in dirty:
                refresh_idle(type_name, current)
            dirty.clear()
        current = at
        if kind == 0:
            if item["type"] == "set_plan":
                plans.set_count(item["plan"], int(item["count"]), at)
            elif item["type"] == "set_capacity":
                type_name = item["instance_type"]
                flush_capacity(type_name, at)
                capacity[type_name] = int(item["capacity"])
                dirty.add(type_name)
            else:
                share = item["share"]
                if "limits" in item:
                    for type_name in set(limits[share]) | set(item["limits"]):
                        flush_su((share, type_name), at)
                    limits[share] = dict(item["limits"])
                    index_limits()
                    dirty.update(type_names)
                    changed.update(type_names)
            continue
        if kind == 1:
            job = jobs[item]
            if not job.terminal and not job.first_admitted and job.admissions == 0:
                set_pending(job, True)
            continue
        event = item
        raw_id = event["job"]
        job = jobs[raw_id if raw_id.__class__ is str else str(raw_id)]
        col = per_share[job.share]
        etype = event["type"]
        if etype == "admitted":
            type_name, count = event["instance_type"], int(event["count"])
            plan = event.get("plan") or None
            if plan is None:
                key = (job.share, type_name)
                flush_su(key, at)
                usage[key] += count
                total_usage[type_name] += count
                dirty.add(type_name)
            else:  # a plan's pool: apart from usage(S, T) and T's total (DESIGN 10)
                plans.add_usage(plan, count, at)
            job.on_plan = plan
            set_pending(job, False)
            borrowed = int(event.get("borrowed") or 0)
            job.ever_borrowed = job.ever_borrowed or borrowed > 0
            if start <= at < stop:
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
            job.run = (type_name, count)
            job.last_run_start = at
        elif etype in RUN_ENDS or etype == "timed_out":
            run = job.run
            if run is not None and etype in RUN_ENDS:
                if job.on_plan is not None:
                    plans.add_usage(job.on_plan, -run[1], at)
                    job.on_plan = None
                else:
                    key = (job.share, run[0])
                    flush_su(key, at)
                    usage[key] -= run[1]
                    total_usage[run[0]] -= run[1]
                    dirty.add(run[0])
                job.run = None
            if etype == "preempted":
                job.preemptions += 1
                job.last_preempted_at = at
                set_pending(job, True)
                if start <= at < stop:
                    reason = event.get("reason") or ""
                    col.suffered[reason] += 1
                    col.lost_work += float(event.get("lost_work") or 0) / unit
                    by = event.get("by")
                    if by is not None and str(by) in jobs:
                        per_share[jobs[str(by)].share].caused[reason] += 1
            else:
                job.terminal = True
                set_pending(job, False)
                if start <= at < stop:
                    col.finished[FINAL_STATES[etype]] += 1
                    col.finished_preemptions += job.preemptions
                    if etype == "timed_out":
                        col.timed_out += 1
                    if etype == "completed":
                        col.turnaround.append(((at - job.submit) / unit, not job.ever_borrowed))
                        col.completed_work += float(job.duration) / unit
                        if run is not None:
                            label = f"{run[0]} x{run[1]}"
                            runtime = (at - job.last_run_start) / unit
                            cost = run[1] * runtime * prices.get(run[0], 0.0) / 3600
                            col.runtime[label].append((runtime, cost))
        job.last_event = etype
    if current is not None:
        for type_name in dirty:
            refresh_idle(type_name, current)
    # close every accumulator at E
    for key in list(since_su):
        flush_su(key, end)
    for type_name in type_names:
        flush_capacity(type_name, end)
        refresh_idle(type_name, end)
    plans.close(end)

    for entry in recording.audit or []:
        at = int(entry["at"])
        if in_window(at) and entry.get("share") in per_share:
            per_share[entry["share"]].policy[entry["type"]] += 1

    # ---- assemble
    integrals: dict[str, Mapping[Any, float]] = {
        "usage": i_usage,
        "own": i_own,
        "borrowed": i_borrowed,
        "capacity": i_capacity,
        "idle_sets": i_idle_sets,
    }
    groups: dict[str, list[str]] = {}
    if group_by == "share":
        groups = {s: [s] for s in share_names}
    else:
        for s in share_names:
            groups.setdefault(recording.teams.get(s, s), []).append(s)
    audit_teams: Counter[tuple[str, str]] = Counter()
    audit_all: Counter[str] = Counter()
    for entry in recording.audit or []:
        if in_window(int(entry["at"])):
            audit_all[entry["type"]] += 1
            if entry.get("team") is not None:
                audit_teams[(entry["team"], entry["type"])] += 1

    def policy(members: list[str], team: str | None, whole: bool) -> dict[str, int] | None:
        if recording.audit is None:
            return None
        if whole:
            return {k: audit_all[k] for k in POLICY_KEYS}
        if team is not None:
            return {k: audit_teams[(team, k)] for k in POLICY_KEYS}
        return {k: sum(per_share[s].policy[k] for s in members) for k in POLICY_KEYS}

    def figures(members: list[str], team: str | None = None, whole: bool = False) -> dict[str, Any]:
        out = _figures(
            [per_share[s] for s in members],
            members,
            type_names,
            prices,
            integrals,
            unit,
        )
        plans.figures(out, members, unit)
        out["policy_changes"] = policy(members, team, whole)
        return out

    answer_groups = []
    for name, members in groups.items():
        row: dict[str, Any] = {group_by: name, "shares": members}
        row.update(figures(members, team=name if group_by == "team" else None))
        answer_groups.append(row)
    return {
        "window": {"from": sec(start), "to": sec(stop), "end": sec(end)},
        "queue": figures(share_names, whole=True),
        "groups": answer_groups,
    }


class _Plans:
    """Capacity plans (DESIGN 10) of a recording: each plan's usage and count integrated
    over its active time inside the window, for ``plan_utilization`` and the plan's cost
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


def _pcts(values: Sequence[float], keys: Iterable[int]) -> dict[str, float | None]:
    ordered = sorted(values)
    return {f"p{k}": _ranked(ordered, k) for k in keys}


def _figures(
    cols: list[_Collector],
    members: list[str],
    type_names: list[str],
    prices: Mapping[str, float],
    integrals: Mapping[str, Mapping[Any, float]],
    unit: int,
) -> dict[str, Any]:
    finished: Counter[str] = Counter()
    for col in cols:
        finished.update(col.finished)
    total_finished = sum(finished.values())
    waits = [w for col in cols for w in col.wait]
    turns = [t for col in cols for t in col.turnaround]
    suffered: Counter[str] = Counter()
    caused: Counter[str] = Counter()
    for col in cols:
        suffered.update(col.suffered)
        caused.update(col.caused)
    lost_work = sum(col.lost_work for col in cols)
    done_work = sum(col.completed_work for col in cols)
    first = [f for col in cols for f in col.first_pref]
    by_pref: dict[int, list[float]] = defaultdict(list)
    for index, wait in first:
        by_pref[index].append(wait)
    runtime: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for col in cols:
        for label, rows in col.runtime.items():
            runtime[label].extend(rows)

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
            "all": _pcts([w for w, _ in waits], (50, 90, 99)),
            "entitled": _pcts([w for w, b in waits if not b], (50, 90, 99)),
            "borrowing": _pcts([w for w, b in waits if b], (50, 90, 99)),
        },
        "turnaround": {
            "all": _pcts([t for t, _ in turns], (50, 90, 99)),
            "only_own": _pcts([t for t, own in turns if own], (50, 90, 99)),
            "borrowed": _pcts([t for t, own in turns if not own], (50, 90, 99)),
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
        "time_to_restart": _pcts([r for col in cols for r in col.restart], (50, 90)),
        "fallback": {
            "by_preference": {str(i): len(by_pref[i]) for i in sorted(by_pref)},
            "wait_to_start_p50": {str(i): percentile(by_pref[i], 50) for i in sorted(by_pref)},
            "timed_out": sum(col.timed_out for col in cols),
        },
        "fallback_rate": _ratio(sum(1 for i, _ in first if i > 0), len(first)),
        # Of the first admissions (in the window) of jobs whose first preference names a
        # capacity plan, the fraction that started on that plan (DESIGN 10).
        "plan_first_rate": _ratio(
            sum(on for col in cols for on in col.plan_first),
            sum(len(col.plan_first) for col in cols),
        ),
        "runtime_by_choice": {
            label: {
                "jobs": len(rows),
                "run_time": _pcts([r for r, _ in rows], (50, 90)),
                "cost_p50": percentile([c for _, c in rows], 50),
            }
            for label, rows in sorted(runtime.items())
        },
        "instance_seconds": seconds,
        "cost": cost,
        "utilization": utilization,
        "idle_lendable_seconds": idle_lendable,
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
