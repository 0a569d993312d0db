"""The ``decisions`` signal (docs/signals.md): of the decisions opened by retry
exhaustion for a group's jobs, ``opened`` and ``decided`` in the window, ``overdue`` (the
due time came in the window before an answer) and ``time_to_decide`` {p50, p90} over
those decided in it.

A recording worked out by hand (times in seconds; window [0, 100)):

- ``a1`` (share A) opened at 10, due 40, decided at 30: 20 s to decide, on time;
- ``a2`` (A) opened at 20, due 50, decided at 70: 50 s, overdue at 50;
- ``a3`` (A) opened at 60, due 90, still open: overdue at 90;
- ``b1`` (B) opened at 5, due 200, open: due after the window, not overdue;
- ``b2`` (B) opened at -50 (before the window), due -10, decided at 15: decided in the
  window after 65 s; its due time is before the window, so not overdue in it.
"""

from __future__ import annotations

from typing import Any

from scheduler import signals

SCENARIO: dict[str, Any] = {
    "instance_types": [{"name": "g", "capacity": 8}],
    "shares": [{"name": "A", "limits": {"g": 4}}, {"name": "B", "limits": {"g": 4}}],
    "jobs": [],
    "until": 99,
}
DECISIONS = [
    {"share": "A", "opened": 10, "due": 40, "decided": 30},
    {"share": "A", "opened": 20, "due": 50, "decided": 70},
    {"share": "A", "opened": 60, "due": 90, "decided": None},
    {"share": "B", "opened": 5, "due": 200, "decided": None},
    {"share": "B", "opened": -50, "due": -10, "decided": 15},
]
REC = signals.Recording(
    scenario=SCENARIO, events=[], teams={"A": "red", "B": "blue"}, decisions=DECISIONS
)


def test_decisions_per_share_and_for_the_queue() -> None:
    answer = signals.compute(REC, 0, 100)
    groups = {g["share"]: g for g in answer["groups"]}
    assert groups["A"]["decisions"] == {
        "opened": 3,
        "decided": 2,
        "overdue": 2,
        "time_to_decide": {"p50": 20.0, "p90": 50.0},
    }
    assert groups["B"]["decisions"] == {
        "opened": 1,
        "decided": 1,
        "overdue": 0,
        "time_to_decide": {"p50": 65.0, "p90": 65.0},
    }
    assert answer["queue"]["decisions"]["time_to_decide"] == {"p50": 50.0, "p90": 65.0}


def test_per_team_and_a_narrower_window() -> None:
    teams = {g["team"]: g for g in signals.compute(REC, 0, 100, group_by="team")["groups"]}
    assert teams["red"]["decisions"]["opened"] == 3
    later = signals.compute(REC, 55, 100)["queue"]["decisions"]
    assert later == {
        "opened": 1,
        "decided": 1,
        "overdue": 1,
        "time_to_decide": {"p50": 50.0, "p90": 50.0},
    }


def test_a_recording_without_decisions_says_null() -> None:
    bare = signals.Recording(scenario=SCENARIO, events=[], teams={"A": "red", "B": "blue"})
    assert signals.compute(bare, 0, 100)["queue"]["decisions"] is None
    [queue, *_] = signals.flat_rows(signals.compute(REC, 0, 100))
    assert (queue["decisions.opened"], queue["decisions.time_to_decide.p50"]) == (4, 50.0)
