"""Plan signals of docs/signals.md (``plan_utilization``, ``plan_first_rate``, a plan's
cost) on a small recording played by the scenario runner and worked out by hand.

One type g (capacity 1, $1 an instance-second), share A with limit 1, and plan P of A on
g: 2 instances during [10, 30) at $2 an instance-second.

- j1 (0 s, names P first, then g x1): P is not active yet, so it runs on g 0-5.
- j2 (12 s, P x1 only): runs on P 12-22.
- j3 (25 s, P x2, then g x1): runs on P 25-30, is preempted at P's end (plan_ended),
  restarts on g at 30 and completes at 50.

Window [0, 60), E = 60:
- P's usage integral = 1 x 10 + 2 x 5 = 20; its count over its active time 2 x 20 = 40,
  so plan_utilization 0.5;
- first admissions of jobs naming a plan first: j1 (on g), j2 and j3 (on P): 2/3;
- cost: P's whole active time x count x price = 40 x 2 = 80, used or not; g 25
  instance-seconds = 25; total 105. Plan usage is not in g's instance-seconds (25).
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import signals, simulate

SCENARIO: dict[str, Any] = {
    "version": 1,
    "instance_types": [{"name": "g", "capacity": 1, "hourly_price": 3600}],
    "shares": [{"name": "A", "policy": "LEND", "limits": {"g": 1}}],
    "plans": [
        {
            "name": "P",
            "instance_type": "g",
            "count": 2,
            "share": "A",
            "start": 10,
            "end": 30,
            "hourly_price": 7200,
        }
    ],
    "jobs": [
        {
            "id": "j1",
            "share": "A",
            "submit_at": 0,
            "priority": 1,
            "duration": 5,
            "preferences": [{"plan": "P", "count": 2}, {"instance_type": "g", "count": 1}],
        },
        {
            "id": "j2",
            "share": "A",
            "submit_at": 12,
            "priority": 1,
            "duration": 10,
            "preferences": [{"plan": "P", "count": 1}],
        },
        {
            "id": "j3",
            "share": "A",
            "submit_at": 25,
            "priority": 1,
            "duration": 20,
            "preferences": [{"plan": "P", "count": 2}, {"instance_type": "g", "count": 1}],
        },
    ],
    "until": 59,
}


def answer(start: int = 0, stop: int = 60, scenario: dict[str, Any] = SCENARIO) -> Any:
    events = simulate.run(scenario)["events"]
    recording = signals.Recording(scenario=scenario, events=events, teams={"A": "team-a"})
    return signals.compute(recording, start, stop)


def test_the_recording_is_the_story_the_module_tells() -> None:
    events = simulate.run(SCENARIO)["events"]
    on_plan = [(e["at"], e["job"]) for e in events if e["type"] == "admitted" and e.get("plan")]
    assert on_plan == [(12, "j2"), (25, "j3")]
    ended = [e for e in events if e["type"] == "preempted"]
    assert [(e["at"], e["reason"]) for e in ended] == [(30, "plan_ended")]


def test_plan_utilization_is_usage_over_count_times_active_time() -> None:
    queue = answer()["queue"]
    assert queue["plan_utilization"] == {"P": pytest.approx(0.5)}
    # the share's group has its plan; over [20, 60) P is used 1 x 2 + 2 x 5 = 12 of 20
    assert answer(20, 60)["groups"][0]["plan_utilization"] == {"P": pytest.approx(12 / 20)}
    # a window without active time: no denominator, null
    assert answer(40, 60)["queue"]["plan_utilization"] == {"P": None}


def test_plan_first_rate_counts_first_admissions_of_jobs_naming_a_plan_first() -> None:
    assert answer()["queue"]["plan_first_rate"] == pytest.approx(2 / 3)
    assert answer(20, 60)["queue"]["plan_first_rate"] == 1.0  # only j3 starts in it
    assert answer(40, 60)["queue"]["plan_first_rate"] is None


def test_a_plan_costs_its_whole_active_time_and_its_usage_is_apart_from_the_type() -> None:
    queue = answer()["queue"]
    assert queue["cost"]["P"] == {"own": 80.0, "borrowed": 0.0, "total": 80.0}
    assert queue["cost"]["g"]["total"] == pytest.approx(25.0)
    assert queue["cost"]["total"]["total"] == pytest.approx(105.0)
    assert queue["instance_seconds"]["g"]["total"] == pytest.approx(25.0)
    assert queue["utilization"]["g"]["all"] == pytest.approx(25 / 60)


def test_a_plan_resize_changes_the_count_integrated_from_then_on() -> None:
    scenario = {**SCENARIO, "actions": [{"at": 20, "type": "set_plan", "plan": "P", "count": 4}]}
    queue = answer(scenario=scenario)["queue"]
    # count 2 over [10, 20) and 4 over [20, 30): 60 instance-seconds, cost 120
    assert queue["cost"]["P"]["total"] == pytest.approx(120.0)
    assert queue["plan_utilization"]["P"] == pytest.approx(20 / 60)


def test_recordings_without_plans_have_empty_plan_figures() -> None:
    scenario = {k: v for k, v in SCENARIO.items() if k != "plans"}
    scenario["jobs"] = [
        {**job, "preferences": [p for p in job["preferences"] if "plan" not in p]}
        for job in SCENARIO["jobs"]
        if any("plan" not in p for p in job["preferences"])
    ]
    queue = answer(scenario=scenario)["queue"]
    assert queue["plan_utilization"] == {}
    assert queue["plan_first_rate"] is None
    assert set(queue["cost"]) == {"g", "total"}
