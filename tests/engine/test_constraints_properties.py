"""Property-based checks of interruption classes and constrained fallback over random
scenarios (docs/scheduling.md#interruption-classes, #deadline-and-budget).

Each generated scenario mixes jobs that may or may not borrow, that are or are not
preemptible, with deadlines, budgets, restart overhead, and preferences with or without
an expected ``runtime`` (some jobs have no ``duration``), over types of several speeds
and prices, a capacity plan, and capacity and share changes. It runs through the public
runner, incrementally and with full re-examination (which must agree); its events are
then replayed to check that:

* no job with ``may_borrow`` false is ever admitted borrowing;
* no job with ``preemptible`` false is ever preempted with reason ``priority``;
* no admission's expected cost exceeds the job's ``max_cost`` and no admission's
  expected end passes its ``deadline``;
* a job times out for its deadline only when every preference is ineligible then, and
  at the first instant that holds (the instant it became pending, or the one where the
  last eligible preference ran out of time).

Checkpoints are left out here (tests/engine/test_constraints.py covers them), so the
remaining work of a job is its duration at every start.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.helpers import simulate
from tests.engine.test_properties import PROFILE

TYPES = {
    "ml.g5.xlarge": (1, 1.41),
    "ml.p4d.24xlarge": (2, 36),
    "ml.c5.xlarge": (0.5, 0.2),
}


@st.composite
def constrained_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    names = list(TYPES)[: draw(st.integers(1, 3))]
    types = [
        {
            "name": name,
            "capacity": draw(st.integers(0, 4)),
            "speed": TYPES[name][0],
            "hourly_price": TYPES[name][1],
        }
        for name in names
    ]
    shares = []
    for s in range(draw(st.integers(1, 3))):
        shares.append(
            {
                "name": f"s{s}",
                "policy": draw(st.sampled_from(["RESERVE", "LEND", "LEND_AND_BORROW"])),
                "limits": {t: draw(st.integers(0, 3)) for t in names},
                "in_share_preemption": draw(st.booleans()),
                "preemption_retries": draw(st.sampled_from([None, None, 1])),
            }
        )
    plans = []
    if draw(st.booleans()):
        start = draw(st.integers(0, 30))
        plans.append(
            {
                "name": "tp",
                "instance_type": draw(st.sampled_from(names)),
                "count": draw(st.integers(1, 3)),
                "share": shares[0]["name"],
                "start": start,
                "end": start + draw(st.integers(10, 80)),
                "hourly_price": draw(st.sampled_from([0, 5, 50])),
            }
        )
    jobs = []
    for j in range(draw(st.integers(1, 12))):
        owner = draw(st.sampled_from(shares))["name"]
        prefs = []
        for _ in range(draw(st.integers(1, 3))):
            if plans and owner == plans[0]["share"] and draw(st.booleans()):
                pref: dict[str, Any] = {"plan": "tp", "count": draw(st.integers(1, 2))}
            else:
                pref = {"instance_type": draw(st.sampled_from(names))}
                pref["count"] = draw(st.integers(1, 3))
            if draw(st.booleans()):
                pref["runtime"] = draw(st.integers(1, 90))
            prefs.append(pref)
        item: dict[str, Any] = {
            "id": f"j{j}",
            "share": owner,
            "submit_at": draw(st.integers(0, 60)),
            "priority": draw(st.integers(0, 5)),
            "preferences": prefs,
            "restart_overhead": draw(st.sampled_from([0, 0, 7])),
            "may_borrow": draw(st.booleans()),
            "preemptible": draw(st.booleans()),
        }
        if draw(st.integers(0, 3)):
            item["duration"] = draw(st.integers(1, 80))
        if draw(st.booleans()):
            item["deadline"] = draw(st.integers(0, 200))
        if draw(st.booleans()):
            item["max_cost"] = draw(st.sampled_from([0, 0.01, 0.1, 0.5, 2, 10]))
        if draw(st.integers(0, 4)) == 0:
            item["max_pending"] = draw(st.integers(0, 60))
        jobs.append(item)
    actions = []
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, 120))
        if draw(st.booleans()):
            actions.append(
                {
                    "at": at,
                    "type": "set_capacity",
                    "instance_type": draw(st.sampled_from(names)),
                    "capacity": draw(st.integers(0, 4)),
                }
            )
        else:
            actions.append(
                {
                    "at": at,
                    "type": "set_share",
                    "share": draw(st.sampled_from(shares))["name"],
                    "limits": {t: draw(st.integers(0, 3)) for t in names},
                }
            )
    data: dict[str, Any] = {
        "instance_types": types,
        "shares": shares,
        "jobs": jobs,
        "actions": actions,
        "until": 300,
    }
    if plans:
        data["plans"] = plans
    return data


def _place(data: dict[str, Any], pref: dict[str, Any]) -> tuple[Fraction, Fraction]:
    """(speed, hourly price) of where a preference runs."""
    speeds = {t["name"]: t["speed"] for t in data["instance_types"]}
    if "plan" in pref:
        plan = data["plans"][0]
        return Fraction(str(speeds[plan["instance_type"]])), Fraction(str(plan["hourly_price"]))
    name = pref["instance_type"]
    return Fraction(str(speeds[name])), Fraction(str(TYPES[name][1]))


def _expected(data: dict[str, Any], job: dict[str, Any], index: int, preempted: bool) -> Any:
    """(R, C) of a preference, R None when unknown (no checkpoints: remaining = duration)."""
    pref = job["preferences"][index]
    speed, price = _place(data, pref)
    overhead = job.get("restart_overhead", 0) if preempted else 0
    if "duration" in job:
        runtime = overhead + math.ceil(Fraction(job["duration"]) / speed)
    elif pref.get("runtime") is not None:
        runtime = overhead + pref["runtime"]
    else:
        return None, None
    return runtime, pref["count"] * price * runtime / 3600


def _eligible(data: dict[str, Any], job: dict[str, Any], index: int, at: int, pre: bool) -> str:
    runtime, cost = _expected(data, job, index, pre)
    if runtime is None:
        return "eligible"
    if job.get("max_cost") is not None and cost > Fraction(str(job["max_cost"])):
        return "over_budget"
    if job.get("deadline") is not None and at + runtime > job["deadline"]:
        return "deadline_unreachable"
    return "eligible"


@settings.get_profile(PROFILE)
@given(constrained_scenarios())
def test_interruption_classes_and_constraints_hold(data: dict[str, Any]) -> None:
    result = simulate(data, explain=True)
    jobs = {j["id"]: j for j in data["jobs"]}
    preempted: set[str] = set()
    pending_since: dict[str, int] = {j["id"]: j["submit_at"] for j in data["jobs"]}
    for event in result["events"]:
        job = jobs.get(event["job"])
        if job is None:
            continue
        kind = event["type"]
        if kind == "admitted":
            assert job.get("may_borrow", True) or event["borrowed"] == 0, event
            index = event["preference"]
            runtime, cost = _expected(data, job, index, job["id"] in preempted)
            if runtime is not None:
                if job.get("max_cost") is not None:
                    assert cost <= Fraction(str(job["max_cost"])), (event, cost)
                if job.get("deadline") is not None:
                    assert event["at"] + runtime <= job["deadline"], (event, runtime)
        elif kind == "preempted":
            if event["reason"] == "priority":
                assert job.get("preemptible", True), event
            preempted.add(job["id"])
            pending_since[job["id"]] = event["at"]
        elif kind == "timed_out":
            assert event["reason"] in ("max_pending", "deadline")
            if event["reason"] == "deadline":
                at = event["at"]
                pre = job["id"] in preempted
                count = len(job["preferences"])
                codes = [_eligible(data, job, k, at, pre) for k in range(count)]
                assert "eligible" not in codes and "deadline_unreachable" in codes, codes
                before = [_eligible(data, job, k, at - 1, pre) for k in range(count)]
                assert at == pending_since[job["id"]] or "eligible" in before, (event, before)
    for job_id, reasons in result["pending"].items():
        job = jobs[job_id]
        pre = job_id in preempted
        for k, reason in enumerate(reasons):
            code = _eligible(data, job, k, data["until"], pre)
            if code != "eligible":
                assert reason["reason"] == code, (job_id, k, reason)
            else:
                assert reason["reason"] not in ("over_budget", "deadline_unreachable")
