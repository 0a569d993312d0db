"""The recording a window's signals read (``history.signals_window``) is read lean: plain
rows of the columns the signals and the lending ledger read, no per-job timeline. It must
be the window's export (``history._export`` of the same jobs), value for value, on
everything those readers see: the recorded events, each job's id, share, submission,
preferences, work and deadline, the types, shares, plans and their changes.

The history is ``tests/services/test_history.py``'s (a simulated queue: runs, reclaims, a
cancel, capacity and share edits), plus jobs written as an executor would have left them:
a lost run, a failure, a time-out, runs without declared work (with and without expected
run times, one still going), a deadline and a priority change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from governance.models import Job, JobEvent, JobState
from scheduler import history
from tests.factories import make_job
from tests.services.test_history import (  # noqa: F401
    G5,
    P4,
    Clock,
    at,
    clock,
    run_history,
    world,
)

pytestmark = pytest.mark.django_db

READ = ("id", "share", "submit_at", "preferences", "duration", "deadline")
WINDOWS = [(-1, 400), (5, 45), (12, 30), (30, 60), (45, 60), (65, 135), (100, 101), (120, 400)]


def _recorded(job: Job, events: list[tuple[float, str, dict[str, Any]]]) -> None:
    for t, type_, data in events:
        JobEvent.objects.create(job=job, at=at(t), type=type_, data=data)


def _executor_jobs(world: Any) -> None:  # noqa: F811
    """Jobs whose timelines the simulated fleet never writes, as an executor reports them."""

    def job(name: str, t: float, end: float | None, **fields: Any) -> Job:
        fields.setdefault("preferences", [{"instance_type": G5, "count": 1}])
        return make_job(
            world.alpha,
            world.red_lead,
            name=name,
            submitted_at=at(t),
            finished_at=at(end) if end is not None else None,
            state=JobState.SUCCEEDED if end is not None else JobState.RUNNING,
            **fields,
        )

    lost = job("lost", 50, 130, duration=None)
    _recorded(
        lost,
        [
            (60, "admitted", {"instance_type": G5, "count": 1, "preference": 0, "borrowed": 1}),
            (80, "lost", {"lost_work": 5.25}),
            (85, "reprioritised", {"before": 5, "after": 7}),
            (90, "admitted", {"instance_type": P4, "count": 1, "preference": 1, "borrowed": 0}),
            (130, "completed", {}),
        ],
    )
    timed = job(
        "runtime", 95, 125, duration=None, deadline=at(120),
        preferences=[{"instance_type": G5, "count": 1, "runtime": 30}],
    )  # fmt: skip
    _recorded(
        timed,
        [
            (100, "admitted", {"instance_type": G5, "count": 1, "preference": 0, "borrowed": 0}),
            (125, "completed", {}),
        ],
    )
    failed = job("failed", 55, 70, duration=20)
    _recorded(
        failed,
        [
            (58, "admitted", {"instance_type": G5, "count": 1, "preference": 0, "borrowed": 0}),
            (70, "failed", {"reason": "exit status 1"}),
        ],
    )
    waited = job("waited", 61, 140, duration=10, max_pending=79)
    _recorded(waited, [(140, "timed_out", {"reason": "max_pending"}), (140, "cancelled", {})])
    going = job("going", 118, None, duration=None)
    _recorded(
        going,
        [
            (119, "admitted", {"instance_type": G5, "count": 1, "preference": 0, "borrowed": 0}),
            (121, "preempted", {"reason": "reclaim", "by": lost.pk, "lost_work": 2}),
            (122, "admitted", {"instance_type": G5, "count": 1, "preference": 0, "borrowed": 0}),
        ],
    )


def _read(exported: dict[str, Any]) -> dict[str, Any]:
    """What the signals and the ledger read of an export."""
    scenario = exported["scenario"]
    return {
        "events": exported["recorded"]["events"],
        "jobs": [{k: job[k] for k in READ if k in job} for job in scenario["jobs"]],
        "actions": [
            a for a in scenario["actions"] if a["type"] in ("set_capacity", "set_share", "set_plan")
        ],
        "rest": {k: scenario.get(k) for k in ("instance_types", "shares", "plans", "until")},
        "teams": exported["teams"],
        "certified": exported.get("certified"),
    }


def test_the_window_recording_is_the_export_of_its_jobs(world: Any, clock: Clock) -> None:  # noqa: F811
    run_history(world, clock)
    _executor_jobs(world)
    now = at(400)
    for lo, hi in WINDOWS:
        start, stop = at(lo), at(hi)
        origin = history.recording_start(world.queue, start)
        lean = history._window_export(world.queue, origin, stop, now=now, active_from=start)
        full = history._export(world.queue, origin, stop, now=now, active_from=start)
        assert _read(lean) == _read(full), (lo, hi)
        # and signals_window reads it
        window = history.signals_window(world.queue, start, stop, now=now)
        assert window.recording.events == full["recorded"]["events"], (lo, hi)
    # the hand-written histories are in it: their work as the export gives it
    whole = history._window_export(world.queue, at(-1), at(400), now=now, active_from=at(-1))
    jobs = {job["id"]: job for job in whole["scenario"]["jobs"]}
    by_name = dict(Job.objects.values_list("name", "pk"))
    assert jobs[str(by_name["lost"])]["duration"] == 40_000 * 2  # the P4 run, speed 2
    assert "duration" not in jobs[str(by_name["runtime"])]  # its run time decides
    assert jobs[str(by_name["runtime"])]["deadline"] == 121_000
    assert jobs[str(by_name["going"])]["duration"] == (400 - 122 + 1) * 1000
    lost = [e for e in whole["recorded"]["events"] if e["job"] == str(by_name["lost"])]
    assert [e["type"] for e in lost] == ["admitted", "preempted", "admitted", "completed"]
    assert lost[1]["reason"] == "capacity_lost" and lost[1]["lost_work"] == 5250


def test_no_job_active_at_the_start_begins_the_recording_at_the_start(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
) -> None:
    run_history(world, clock)
    assert history.recording_start(world.queue, at(399)) == at(399)
    first: datetime = history.recording_start(world.queue, at(20))
    assert first == at(0)  # b1, submitted at 0, still running at 20
