"""The signals pass walks the timeline in one loop with its per-event steps written out
(``_Pass.replay``, for speed) and counts the jobs that became pending, or stopped
being so, in their shapes only at the end of each instant (``_Pass.settle``). This keeps
the walk it replaced, one method per step (an event's dispatch, an admission, the release
of a run, a job pending or no longer at once), as the reference, and
checks that both give the same answer, value for value, on seeded random queues: the
engine's random scenarios, with capacity plans, and windows cutting through them. Each
group's percentiles (read from its shares' values sorted once) are checked against the
group's raw values sorted as they were.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import signals
from scheduler.gcpause import gc_paused
from scheduler.signals import _NEVER, RUN_ENDS, Recording, _Answer, _Cell, _Collector, _Job, _Pass
from scheduler.simulate import run
from tests.engine.test_plans_properties import plan_scenarios
from tests.engine.test_properties import PROFILE, scenarios


class _StepPass(_Pass):
    """The walk as it was: the loop calls a method per timeline item and per event."""

    def replay(self, events: Sequence[Mapping[str, Any]], changes: Sequence[Any]) -> None:
        total = len(changes)
        next_change = changes[0][0] if changes else _NEVER
        c = 0
        for event in events:
            at = event["at"]
            while next_change <= at:
                self.apply_timed(changes[c])
                c += 1
                next_change = changes[c][0] if c < total else _NEVER
            self.move_to(at)
            self.apply_event(event, at)
        for change in changes[c:]:
            self.apply_timed(change)
        if self.current is not None:
            self.end_instant(self.current)
        self.close()

    def apply_event(self, event: Mapping[str, Any], at: int) -> None:
        job = self.jobs[str(event["job"])]
        col = self.per_share[job.share]
        etype = event["type"]
        if etype == "admitted":
            self.admitted(job, col, event, at)
        elif etype in RUN_ENDS or etype == "timed_out":
            ran = self.stop_run(job, etype, at)
            if etype == "preempted":
                self.preempted(job, col, event, at)
            else:
                self.finished(job, col, etype, ran, at)
        job.last_event = etype

    def set_pending(self, job: _Job, on: bool) -> None:
        """At once, as it was (the pass counts the jobs touched in an instant in their
        shapes at its end, ``_Pass.settle``)."""
        if job.pending == on:
            return
        job.pending = on
        shape = job.shape
        if on:
            shape.pending += 1
            if shape.pending > 1:
                return
        else:
            shape.pending -= 1
            if shape.pending:
                return
        self.shape_pending(shape, on)

    def admitted(self, job: _Job, col: _Collector, event: Mapping[str, Any], at: int) -> None:
        count = int(event["count"])
        cell = job.row[event["instance_type"]]
        plan = event.get("plan") or None
        if plan is None:
            self.flush(cell, at)
            cell.usage += count
            cell.type.total += count
            self.dirty.add(cell.type)
        else:
            self.plans.add_usage(plan, count, at)
        job.on_plan = plan
        self.set_pending(job, False)
        borrowed = int(event.get("borrowed") or 0)
        job.ever_borrowed = job.ever_borrowed or borrowed > 0
        if self.start <= at < self.stop:
            if not job.first_admitted:
                if job.first_plan is not None:
                    col.plan_first.append(plan == job.first_plan)
                wait = (at - job.submit) / self.unit
                col.wait.append((wait, borrowed > 0))
                col.first_pref.append((int(event.get("preference") or 0), wait))
            if job.last_event == "preempted":
                col.restart.append((at - job.last_preempted_at) / self.unit)
        job.first_admitted = True
        job.admissions += 1
        job.run = (cell, count)
        job.last_run_start = at

    def stop_run(self, job: _Job, etype: str, at: int) -> tuple[_Cell, int] | None:
        ran = job.run
        if ran is not None and etype in RUN_ENDS:
            if job.on_plan is not None:
                self.plans.add_usage(job.on_plan, -ran[1], at)
                job.on_plan = None
            else:
                cell = ran[0]
                self.flush(cell, at)
                cell.usage -= ran[1]
                cell.type.total -= ran[1]
                self.dirty.add(cell.type)
            job.run = None
        return ran


def _reference(rec: Recording, start: int, stop: int, group_by: str) -> dict[str, Any]:
    with gc_paused():
        state = _StepPass(rec, start, stop)
        changes, events = signals._timeline(rec, state.jobs)
        state.replay(events, changes)
        state.count_policy(rec.audit)
        answer = _Answer(rec, state, group_by)
        built = answer.build()
    # the percentiles as they were read: each group's raw values, sorted there
    for group in built["groups"]:
        assert _percentiles([state.per_share[s] for s in group["shares"]]) == {
            "wait_to_start": group["wait_to_start"],
            "turnaround": group["turnaround"],
            "time_to_restart": group["time_to_restart"],
            "fallback_p50": group["fallback"]["wait_to_start_p50"],
            "runtime_by_choice": group["runtime_by_choice"],
        }
    return built


def _percentiles(cols: list[_Collector]) -> dict[str, Any]:
    def pcts(values: list[float], keys: tuple[int, ...]) -> dict[str, float | None]:
        return {f"p{k}": signals.percentile(values, k) for k in keys}

    waits = [w for col in cols for w in col.wait]
    turns = [t for col in cols for t in col.turnaround]
    by_pref: dict[int, list[float]] = {}
    for col in cols:
        for index, wait in col.first_pref:
            by_pref.setdefault(index, []).append(wait)
    runtime: dict[str, list[tuple[float, float]]] = {}
    for col in cols:
        for label, rows in col.runtime.items():
            runtime.setdefault(label, []).extend(rows)
    return {
        "wait_to_start": {
            "all": pcts([w for w, _ in waits], (50, 90, 99)),
            "entitled": pcts([w for w, b in waits if not b], (50, 90, 99)),
            "borrowing": pcts([w for w, b in waits if b], (50, 90, 99)),
        },
        "turnaround": {
            "all": pcts([t for t, _ in turns], (50, 90, 99)),
            "only_own": pcts([t for t, own in turns if own], (50, 90, 99)),
            "borrowed": pcts([t for t, own in turns if not own], (50, 90, 99)),
        },
        "time_to_restart": pcts([r for col in cols for r in col.restart], (50, 90)),
        "fallback_p50": {str(i): signals.percentile(by_pref[i], 50) for i in sorted(by_pref)},
        "runtime_by_choice": {
            label: {
                "jobs": len(rows),
                "run_time": pcts([r for r, _ in rows], (50, 90)),
                "cost_p50": signals.percentile([c for _, c in rows], 50),
            }
            for label, rows in sorted(runtime.items())
        },
    }


def _same_on_windows(data: dict[str, Any], seed: int) -> None:
    events = run(data)["events"]
    teams = {s["name"]: f"team-{i % 2}" for i, s in enumerate(data["shares"])}
    rec = Recording(scenario=data, events=events, teams=teams)
    end = signals.recording_end(rec)
    rng = random.Random(seed)
    windows = [(0, end), *((rng.randint(0, end), rng.randint(0, end + 5)) for _ in range(3))]
    for lo, hi in windows:
        lo, hi = min(lo, hi), max(lo, hi) + 1
        for group_by in signals.GROUP_BY:
            expected = _reference(rec, lo, hi, group_by)
            assert signals.compute(rec, lo, hi, group_by=group_by) == expected, (lo, hi)


@settings.get_profile(PROFILE)
@given(data=scenarios(), seed=st.integers(0, 1000))
def test_the_walk_answers_as_the_step_by_step_walk(data: dict[str, Any], seed: int) -> None:
    _same_on_windows(data, seed)


@settings.get_profile(PROFILE)
@given(data=plan_scenarios(), seed=st.integers(0, 1000))
def test_the_walk_answers_as_the_step_by_step_walk_with_plans(
    data: dict[str, Any], seed: int
) -> None:
    _same_on_windows(data, seed)
