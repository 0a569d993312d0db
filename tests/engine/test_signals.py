"""Every signal of docs/signals.md against values worked out by hand.

The recording (``data/signals_small.json``) is the engine's own output for a small
scenario (the first test replays it), so the history is one that can happen:

types A (capacity 3, 3.6/h = 0.001/s) and B (accelerated, capacity 0, 1 from t=30,
7.2/h = 0.002/s); shares ``own`` (team red, LEND, A:2) and ``bor`` (team blue,
LEND_AND_BORROW 100 %, A:1 B:1, in-share preemption, 1 retry; B:0 from t=105).

    t=0   b1 admitted A x2 (borrowed 1)        t=60  o1 completed
    t=10  o1 admitted A x1                     t=65  b3 submitted A x3: borrow_limit_reached
    t=20  b1 preempted (reclaim by o2, lost 20) for ever after
          o2 admitted A x1                     t=70  b2 timed out (submitted 40, B x1)
    t=30  b1 admitted B x1 (second choice)     t=80  o3 admitted A x1; t=90 cancelled
    t=45  b4 submitted (B x1, A x2)            t=100 b1 preempted (priority by b5, lost 70)
    t=50  o2 completed; b4 admitted A x2             and failed (retries); b5 admitted B x1
          (second choice, borrowed 1)          t=110 b5 completed
    t=58  b4 completed                         until 149: E = 150
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler import signals, simulate
from scheduler.signals import Recording, compute, percentile

DATA = json.loads((Path(__file__).parent / "data" / "signals_small.json").read_text())
REC = Recording(scenario=DATA["scenario"], events=DATA["recorded"], teams=DATA["teams"])


def approx(value: Any) -> Any:
    return pytest.approx(value, abs=1e-6)


def group(answer: dict[str, Any], name: str) -> dict[str, Any]:
    key = "team" if "team" in answer["groups"][0] else "share"
    return next(g for g in answer["groups"] if g[key] == name)


@pytest.fixture(scope="module")
def full() -> dict[str, Any]:
    return compute(REC, 0, 150)


def test_the_recording_is_what_the_engine_does() -> None:
    assert simulate.run(DATA["scenario"])["events"] == DATA["recorded"]


def test_percentiles_use_the_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([7, 3], 50) == 3  # p50 of two values is the smaller
    assert percentile([0, 0, 5], 90) == 5
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([4], 1) == 4


def test_window_and_end(full: dict[str, Any]) -> None:
    assert full["window"] == {"from": 0, "to": 150, "end": 150}
    assert [g["share"] for g in full["groups"]] == ["own", "bor"]


def test_jobs_finished(full: dict[str, Any]) -> None:
    own = {"SUCCEEDED": 2, "FAILED": 0, "TIMED_OUT": 0, "CANCELLED": 1, "total": 3}
    bor = {"SUCCEEDED": 2, "FAILED": 1, "TIMED_OUT": 1, "CANCELLED": 0, "total": 4}
    assert group(full, "own")["jobs_finished"] == own
    assert group(full, "bor")["jobs_finished"] == bor
    assert full["queue"]["jobs_finished"]["total"] == 7


def test_wait_to_start(full: dict[str, Any]) -> None:
    zeros = {"p50": 0, "p90": 0, "p99": 0}
    nulls = {"p50": None, "p90": None, "p99": None}
    assert group(full, "own")["wait_to_start"] == {
        "all": zeros,
        "entitled": zeros,
        "borrowing": nulls,
    }
    # bor: b1 0 (borrowing), b4 5 (borrowing), b5 0 (entitled); b1's restart is no first
    assert group(full, "bor")["wait_to_start"] == {
        "all": {"p50": 0, "p90": 5, "p99": 5},
        "entitled": zeros,
        "borrowing": {"p50": 0, "p90": 5, "p99": 5},
    }
    assert full["queue"]["wait_to_start"]["all"] == {"p50": 0, "p90": 5, "p99": 5}


def test_turnaround(full: dict[str, Any]) -> None:
    # own: o2 30, o1 50. bor: b4 13 (it borrowed), b5 10. b1 failed, b3 never ran.
    assert group(full, "own")["turnaround"]["all"] == {"p50": 30, "p90": 50, "p99": 50}
    assert group(full, "own")["turnaround"]["borrowed"] == {"p50": None, "p90": None, "p99": None}
    assert group(full, "bor")["turnaround"] == {
        "all": {"p50": 10, "p90": 13, "p99": 13},
        "only_own": {"p50": 10, "p90": 10, "p99": 10},
        "borrowed": {"p50": 13, "p90": 13, "p99": 13},
    }
    # queue: [10, 13, 30, 50]; only own [10, 30, 50]
    assert full["queue"]["turnaround"]["all"] == {"p50": 13, "p90": 50, "p99": 50}
    assert full["queue"]["turnaround"]["only_own"] == {"p50": 30, "p90": 50, "p99": 50}


def test_preemptions_suffered_and_caused(full: dict[str, Any]) -> None:
    none = {"reclaim": 0, "priority": 0, "capacity_lost": 0, "total": 0}
    assert group(full, "own")["preemptions_suffered"] == none
    assert group(full, "bor")["preemptions_suffered"] == {
        "reclaim": 1,
        "priority": 1,
        "capacity_lost": 0,
        "total": 2,
    }
    assert group(full, "own")["preemptions_caused"] == {"reclaim": 1, "priority": 0, "total": 1}
    assert group(full, "bor")["preemptions_caused"] == {"reclaim": 0, "priority": 1, "total": 1}
    assert full["queue"]["preemptions_caused"]["total"] == 2


def test_lost_work_and_goodput(full: dict[str, Any]) -> None:
    assert group(full, "own")["lost_work"] == 0
    assert group(full, "bor")["lost_work"] == approx(90)
    assert group(full, "own")["goodput"] == approx(1.0)  # 80 / 80
    assert group(full, "bor")["goodput"] == approx(18 / 108)  # (8 + 10) / (18 + 90)
    assert full["queue"]["goodput"] == approx(98 / 188)


def test_preemptions_per_finished_job(full: dict[str, Any]) -> None:
    assert group(full, "own")["preemptions_per_finished_job"] == approx(0)
    assert group(full, "bor")["preemptions_per_finished_job"] == approx(2 / 4)
    assert full["queue"]["preemptions_per_finished_job"] == approx(2 / 7)


def test_time_to_restart(full: dict[str, Any]) -> None:
    assert group(full, "bor")["time_to_restart"] == {"p50": 10, "p90": 10}
    assert group(full, "own")["time_to_restart"] == {"p50": None, "p90": None}


def test_fallback_and_rate(full: dict[str, Any]) -> None:
    assert group(full, "bor")["fallback"] == {
        "by_preference": {"0": 2, "1": 1},
        "wait_to_start_p50": {"0": 0, "1": 5},
        "timed_out": 1,
    }
    assert group(full, "own")["fallback"]["timed_out"] == 0
    assert group(full, "bor")["fallback_rate"] == approx(1 / 3)
    assert group(full, "own")["fallback_rate"] == approx(0)
    assert full["queue"]["fallback_rate"] == approx(1 / 6)


def test_runtime_by_choice(full: dict[str, Any]) -> None:
    rows = full["queue"]["runtime_by_choice"]
    assert rows.keys() == {"A x1", "A x2", "B x1"}
    assert rows["A x1"]["jobs"] == 2
    assert rows["A x1"]["run_time"] == {"p50": 30, "p90": 50}
    assert rows["A x1"]["cost_p50"] == approx(0.03)  # 1 x 30 s x 0.001
    assert rows["A x2"]["cost_p50"] == approx(0.016)  # 2 x 8 s x 0.001
    assert rows["B x1"]["run_time"] == {"p50": 10, "p90": 10}
    assert rows["B x1"]["cost_p50"] == approx(0.02)


def test_instance_seconds_with_limits_in_force(full: dict[str, Any]) -> None:
    assert group(full, "own")["instance_seconds"]["A"] == approx(
        {"own": 90, "borrowed": 0, "total": 90}
    )
    assert group(full, "bor")["instance_seconds"]["A"] == approx(
        {"own": 28, "borrowed": 28, "total": 56}
    )
    # b5 on B from 100 to 110: its limit drops to 0 at 105, so 5 s own, 5 s borrowed
    assert group(full, "bor")["instance_seconds"]["B"] == approx(
        {"own": 75, "borrowed": 5, "total": 80}
    )


def test_cost(full: dict[str, Any]) -> None:
    assert group(full, "bor")["cost"]["B"] == approx({"own": 0.15, "borrowed": 0.01, "total": 0.16})
    assert group(full, "bor")["cost"]["total"] == approx(
        {"own": 0.178, "borrowed": 0.038, "total": 0.216}
    )
    assert full["queue"]["cost"]["total"] == approx(
        {"own": 0.268, "borrowed": 0.038, "total": 0.306}
    )


def test_utilization(full: dict[str, Any]) -> None:
    # capacity integrals: A 3 x 150 = 450, B 1 x 120 = 120
    assert group(full, "own")["utilization"]["A"] == approx({"all": 90 / 450, "borrowed": 0})
    assert group(full, "bor")["utilization"]["B"] == approx({"all": 80 / 120, "borrowed": 5 / 120})
    assert full["queue"]["utilization"]["A"] == approx({"all": 146 / 450, "borrowed": 28 / 450})


def test_idle_lendable_seconds(full: dict[str, Any]) -> None:
    # b3 (A x3) waits from 65 while A is wholly idle except o3's [80, 90): 3 x (15 + 60)
    assert group(full, "bor")["idle_lendable_seconds"] == approx({"A": 225, "B": 0})
    assert group(full, "own")["idle_lendable_seconds"] == approx({"A": 0, "B": 0})
    assert full["queue"]["idle_lendable_seconds"] == approx({"A": 225, "B": 0})


def test_policy_changes_null_without_audit_and_counted_with(full: dict[str, Any]) -> None:
    assert full["queue"]["policy_changes"] is None
    audit = [
        {"at": 105, "type": "share_edits", "share": "bor", "team": "blue"},
        {"at": 20, "type": "priority_changes", "share": "own", "team": "red"},
        {"at": 150, "type": "share_edits", "share": "own", "team": "red"},  # not in window
    ]
    rec = Recording(REC.scenario, REC.events, REC.teams, audit=audit)
    by_team = compute(rec, 0, 150, group_by="team")
    assert [g["team"] for g in by_team["groups"]] == ["red", "blue"]
    assert group(by_team, "blue")["policy_changes"]["share_edits"] == 1
    assert group(by_team, "red")["policy_changes"]["share_edits"] == 0
    assert group(by_team, "red")["policy_changes"]["priority_changes"] == 1
    assert by_team["queue"]["policy_changes"]["share_edits"] == 1


def test_a_window_counts_only_its_events_and_integrates_only_its_time() -> None:
    answer = compute(REC, 20, 100)
    own, bor = group(answer, "own"), group(answer, "bor")
    assert own["jobs_finished"]["total"] == 3
    # b1 fails at 100: outside [20, 100)
    assert bor["jobs_finished"] == {
        "SUCCEEDED": 1,
        "FAILED": 0,
        "TIMED_OUT": 1,
        "CANCELLED": 0,
        "total": 2,
    }
    assert bor["wait_to_start"]["all"] == {"p50": 5, "p90": 5, "p99": 5}  # b4 only
    assert bor["preemptions_suffered"]["total"] == 1 and bor["lost_work"] == approx(20)
    assert bor["time_to_restart"] == {"p50": 10, "p90": 10}
    assert bor["preemptions_per_finished_job"] == approx(0)
    assert own["instance_seconds"]["A"]["total"] == approx(80)  # o1 40 + o2 30 + o3 10
    assert bor["instance_seconds"]["A"] == approx({"own": 8, "borrowed": 8, "total": 16})
    assert bor["instance_seconds"]["B"]["own"] == approx(70)
    assert bor["utilization"]["B"]["all"] == approx(1.0)  # 70 / 70
    assert answer["queue"]["idle_lendable_seconds"]["A"] == approx(45 + 30)


def test_integrals_stop_at_the_end_of_the_recording() -> None:
    answer = compute(REC, 100, 1000)
    bor = group(answer, "bor")
    assert bor["instance_seconds"]["B"] == approx({"own": 5, "borrowed": 5, "total": 10})
    assert bor["utilization"]["B"]["all"] == approx(10 / 50)
    assert bor["idle_lendable_seconds"]["A"] == approx(150)


def test_milliseconds_report_seconds() -> None:
    scenario = json.loads(json.dumps(REC.scenario))
    scenario["time_unit"] = "ms"
    scale = 1000
    for job in scenario["jobs"]:
        job["submit_at"] *= scale
        job["duration"] *= scale
        if job.get("max_pending") is not None:
            job["max_pending"] *= scale
    for action in scenario["actions"]:
        action["at"] *= scale
    scenario["until"] = 150 * scale - 1
    events = [dict(e, at=e["at"] * scale) for e in REC.events]
    for event in events:
        if "lost_work" in event:
            event["lost_work"] *= scale
    answer = compute(Recording(scenario, events, REC.teams), 0, 150 * scale)
    bor = group(answer, "bor")
    assert bor["lost_work"] == approx(90)
    assert bor["wait_to_start"]["all"]["p90"] == approx(5)
    assert bor["instance_seconds"]["B"] == approx({"own": 75, "borrowed": 5, "total": 80})
    assert bor["idle_lendable_seconds"]["A"] == approx(225)
    assert answer["window"] == approx({"from": 0, "to": 150, "end": 150})


def test_flat_rows_for_csv(full: dict[str, Any]) -> None:
    rows = signals.flat_rows(full)
    assert [r["share"] for r in rows] == ["(queue)", "own", "bor"]
    assert rows[2]["jobs_finished.total"] == 4
    assert rows[2]["wait_to_start.borrowing.p90"] == 5


def test_group_by_is_checked() -> None:
    with pytest.raises(ValueError, match="group_by"):
        compute(REC, 0, 10, group_by="queue")
