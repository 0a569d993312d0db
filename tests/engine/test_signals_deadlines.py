"""The ``deadlines`` signal (docs/signals.md): over jobs with a deadline whose final
event lies in the window, ``met`` completed at or before it, ``late`` completed after
it, ``timed_out`` timed out for it (reason ``deadline``); ``rate`` = met / (met + late +
timed_out). ``fallback.timed_out`` keeps counting every time-out.

A recording worked out by hand (a live queue records what happened, which may differ
from what was expected: ``late`` ran longer than its expected run time):

- ``met`` (A, deadline 100) completes at 50; ``late`` (A, deadline 40) completes at 60;
- ``dl`` (A, deadline 10) times out at 0 for its deadline; ``mp`` (A, deadline 1000)
  times out at 5 for its max pending time: it counts in no outcome;
- ``gone`` (A, deadline 100) is cancelled at 20: no outcome either;
- ``b1`` (B, deadline 30) completes at 30, exactly at its deadline: met;
- ``plain`` (B, no deadline) completes at 10: not counted.
"""

from __future__ import annotations

from typing import Any

from scheduler import signals


def _job(job_id: str, share: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "share": share,
        "submit_at": 0,
        "priority": 1,
        "duration": 50,
        "preferences": [{"instance_type": "g", "count": 1}],
        **extra,
    }


SCENARIO: dict[str, Any] = {
    "instance_types": [{"name": "g", "capacity": 8}],
    "shares": [{"name": "A", "limits": {"g": 4}}, {"name": "B", "limits": {"g": 4}}],
    "jobs": [
        _job("met", "A", deadline=100),
        _job("late", "A", deadline=40),
        _job("dl", "A", deadline=10),
        _job("mp", "A", deadline=1000, max_pending=5),
        _job("gone", "A", deadline=100),
        _job("b1", "B", deadline=30),
        _job("plain", "B"),
    ],
    "until": 99,
}


def _admitted(job: str) -> dict[str, Any]:
    return {
        "at": 0,
        "type": "admitted",
        "job": job,
        "instance_type": "g",
        "count": 1,
        "preference": 0,
        "borrowed": 0,
    }


EVENTS = [
    _admitted("met"),
    _admitted("late"),
    _admitted("gone"),
    _admitted("b1"),
    _admitted("plain"),
    {"at": 0, "type": "timed_out", "job": "dl", "reason": "deadline"},
    {"at": 5, "type": "timed_out", "job": "mp", "reason": "max_pending"},
    {"at": 10, "type": "completed", "job": "plain"},
    {"at": 20, "type": "cancelled", "job": "gone"},
    {"at": 30, "type": "completed", "job": "b1"},
    {"at": 50, "type": "completed", "job": "met"},
    {"at": 60, "type": "completed", "job": "late"},
]
REC = signals.Recording(scenario=SCENARIO, events=EVENTS, teams={"A": "red", "B": "red"})


def test_deadlines_per_share_and_for_the_queue() -> None:
    answer = signals.compute(REC, 0, 100)
    groups = {g["share"]: g for g in answer["groups"]}
    assert groups["A"]["deadlines"] == {"met": 1, "late": 1, "timed_out": 1, "rate": 1 / 3}
    assert groups["B"]["deadlines"] == {"met": 1, "late": 0, "timed_out": 0, "rate": 1.0}
    assert answer["queue"]["deadlines"] == {"met": 2, "late": 1, "timed_out": 1, "rate": 0.5}
    # every time-out still counts in fallback, whatever its reason
    assert answer["queue"]["fallback"]["timed_out"] == 2


def test_only_final_events_in_the_window_count_and_teams_sum_their_shares() -> None:
    answer = signals.compute(REC, 55, 100, group_by="team")
    assert answer["queue"]["deadlines"] == {"met": 0, "late": 1, "timed_out": 0, "rate": 0.0}
    assert signals.compute(REC, 70, 100)["queue"]["deadlines"]["rate"] is None
    [red] = signals.compute(REC, 0, 100, group_by="team")["groups"]
    assert red["deadlines"] == {"met": 2, "late": 1, "timed_out": 1, "rate": 0.5}


def test_the_csv_rows_carry_the_figure() -> None:
    [queue, *_] = signals.flat_rows(signals.compute(REC, 0, 100))
    assert (queue["deadlines.met"], queue["deadlines.rate"]) == (2, 0.5)


def test_a_job_with_only_expected_run_times_counts_its_last_run_as_its_work() -> None:
    """A job with no declared work (only a run time per preference: the export leaves
    ``duration`` out so those decide) is read, not refused (it made /signals/ a server
    error), and its completed work is what its last run did: time x the type's speed."""
    scenario = {
        "instance_types": [{"name": "g", "capacity": 2, "speed": 2.0}],
        "shares": [{"name": "A", "limits": {"g": 2}}],
        "jobs": [
            {
                "id": "runtime-only",
                "share": "A",
                "submit_at": 0,
                "priority": 1,
                "preferences": [{"instance_type": "g", "count": 1, "runtime": 30}],
            }
        ],
        "until": 99,
    }
    events = [
        {**_admitted("runtime-only"), "at": 10},
        {"at": 40, "type": "preempted", "job": "runtime-only", "lost_work": 20},
        {**_admitted("runtime-only"), "at": 50},
        {"at": 80, "type": "completed", "job": "runtime-only"},
    ]
    recording = signals.Recording(scenario=scenario, events=events, teams={"A": "red"})
    answer = signals.compute(recording, 0, 100)
    # 30 s at speed 2 done, 20 lost: goodput 60 / (60 + 20)
    assert answer["queue"]["goodput"] == 60 / 80
    assert answer["queue"]["jobs_finished"]["SUCCEEDED"] == 1
