"""Property-based checks of capacity plans (docs/scheduling.md#capacity-plans) over random
scenarios.

Each generated scenario (types, shares, plans with random windows and counts, training
and processing jobs whose lists mix plans and types, capacity, share and plan changes)
runs through the public runner, incrementally and with full re-examination (which must
agree); its event stream is then replayed to check that:

* a plan's usage never exceeds its count at the end of any instant;
* nothing runs on a plan outside ``[start, end)``: a run on a plan starts within the
  window and stops no later than its end, where a run still on it is preempted with
  ``plan_ended``;
* only training jobs of the plan's share run on it, and only through a preference that
  names it; on-demand runs use a preference that names their type;
* on-demand usage never exceeds the type's capacity (plan runs are apart from it);
* a job fails for exhausted retries exactly when its preemptions other than
  ``capacity_lost`` and ``plan_ended`` exceed its share's retry limit.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.helpers import simulate
from tests.engine.test_properties import PROFILE

TYPES = ["ml.g5.xlarge", "ml.p4d.24xlarge"]
UNCOUNTED = {"capacity_lost", "plan_ended"}


@st.composite
def plan_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    names = TYPES[: draw(st.integers(1, 2))]
    types = [{"name": t, "capacity": draw(st.integers(0, 4))} for t in names]
    shares = []
    for s in range(draw(st.integers(1, 3))):
        shares.append(
            {
                "name": f"s{s}",
                "policy": draw(st.sampled_from(["RESERVE", "LEND", "LEND_AND_BORROW"])),
                "limits": {t: draw(st.integers(0, 3)) for t in names},
                "in_share_preemption": draw(st.booleans()),
                "preemption_retries": draw(st.sampled_from([None, 0, 1])),
            }
        )
    plans = []
    for p in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, 40))
        plans.append(
            {
                "name": f"plan{p}",
                "instance_type": draw(st.sampled_from(names)),
                "count": draw(st.integers(0, 4)),
                "share": draw(st.sampled_from(shares))["name"],
                "start": start,
                "end": start + draw(st.integers(1, 60)),
            }
        )
    jobs = []
    for j in range(draw(st.integers(1, 12))):
        owner = draw(st.sampled_from(shares))["name"]
        kind = draw(st.sampled_from(["training", "training", "processing"]))
        mine = [p["name"] for p in plans if p["share"] == owner] if kind == "training" else []
        options = [("type", t) for t in names] + [("plan", name) for name in mine]
        chosen = draw(st.lists(st.sampled_from(options), min_size=1, max_size=3))
        jobs.append(
            {
                "id": f"j{j}",
                "share": owner,
                "kind": kind,
                "submit_at": draw(st.integers(0, 50)),
                "priority": draw(st.integers(0, 3)),
                "preferences": [
                    {("plan" if what == "plan" else "instance_type"): name, "count": n}
                    for what, name in chosen
                    for n in [draw(st.integers(1, 3))]
                ],
                "duration": draw(st.integers(1, 60)),
                "checkpoint_interval": draw(st.sampled_from([None, 5])),
                "max_pending": draw(st.sampled_from([None, None, 20])),
            }
        )
    actions: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, 70))
        kind = draw(st.sampled_from(["set_plan", "set_plan", "set_capacity", "set_share"]))
        action: dict[str, Any] = {"at": at, "type": kind}
        if kind == "set_plan":
            action["plan"] = draw(st.sampled_from(plans))["name"]
            action["count"] = draw(st.integers(0, 4))
        elif kind == "set_capacity":
            action["instance_type"] = draw(st.sampled_from(names))
            action["capacity"] = draw(st.integers(0, 4))
        else:
            action["share"] = draw(st.sampled_from(shares))["name"]
            action["in_share_preemption"] = draw(st.booleans())
        actions.append(action)
    return {
        "instance_types": types,
        "shares": shares,
        "plans": plans,
        "jobs": jobs,
        "actions": actions,
    }


def check_plans(data: dict[str, Any], result: dict[str, Any]) -> None:
    plans = {p["name"]: dict(p) for p in data["plans"]}
    jobs = {j["id"]: j for j in data["jobs"]}
    retries = {s["name"]: s.get("preemption_retries") for s in data["shares"]}
    capacity_changes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for action in data.get("actions", []):
        capacity_changes[action["at"]].append(action)
    capacity = {t["name"]: t["capacity"] for t in data["instance_types"]}
    running: dict[str, tuple[str | None, str, int, int]] = {}  # job -> (plan, type, n, since)
    counted: dict[str, int] = defaultdict(int)
    by_time: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in result["events"]:
        by_time[event["at"]].append(event)
    instants = sorted(set(by_time) | set(capacity_changes))
    for now in instants:
        for action in capacity_changes.get(now, []):
            if action["type"] == "set_plan":
                plans[action["plan"]]["count"] = action["count"]
            elif action["type"] == "set_capacity":
                capacity[action["instance_type"]] = action["capacity"]
        batch = by_time.get(now, [])
        for i, event in enumerate(batch):
            job_id = event["job"]
            job = jobs[job_id]
            if event["type"] == "admitted":
                pref = job["preferences"][event["preference"]]
                count = pref.get("count", job.get("count"))
                assert event["count"] == count
                if "plan" in event:
                    spec = plans[event["plan"]]
                    assert pref.get("plan") == event["plan"]
                    assert job["share"] == spec["share"]
                    assert job.get("kind", "training") == "training"
                    assert spec["start"] <= now < spec["end"]
                    assert event["borrowed"] == 0
                    assert event["instance_type"] == spec["instance_type"]
                else:
                    assert pref.get("instance_type") == event["instance_type"]
                running[job_id] = (event.get("plan"), event["instance_type"], count, now)
            elif event["type"] in ("preempted", "completed", "cancelled"):
                if job_id not in running:
                    continue  # a cancel of a pending job
                on_plan, _, _, _ = running.pop(job_id)
                if event["type"] == "preempted":
                    assert event.get("plan") == on_plan
                    if event["reason"] == "plan_ended":
                        assert on_plan is not None and plans[on_plan]["end"] == now
                    else:
                        counted[job_id] += 0 if event["reason"] in UNCOUNTED else 1
                    limit = retries[job["share"]]
                    exhausted = limit is not None and counted[job_id] > limit
                    follows = i + 1 < len(batch) and batch[i + 1] == {
                        "at": now,
                        "type": "failed",
                        "job": job_id,
                        "reason": "preemption_retries_exhausted",
                    }
                    assert follows == exhausted, (job_id, counted[job_id], limit)
                if on_plan is not None:
                    assert now <= plans[on_plan]["end"]
        # the end of the instant
        usage: dict[str, int] = defaultdict(int)
        on_demand: dict[str, int] = defaultdict(int)
        for on_plan, type_name, count, _ in running.values():
            if on_plan is None:
                on_demand[type_name] += count
            else:
                usage[on_plan] += count
        for name, spec in plans.items():
            assert usage[name] <= spec["count"], (now, name)
            if not spec["start"] <= now < spec["end"]:
                assert usage[name] == 0, (now, name)
        for type_name, used in on_demand.items():
            assert used <= capacity[type_name], (now, type_name)
    # whatever still runs at the end is on a plan whose end the run never reached
    for job_id, (on_plan, _, _, _) in running.items():
        assert result["jobs"][job_id]["state"] == "RUNNING"
        assert on_plan is None, (job_id, on_plan)


@settings.get_profile(PROFILE)
@given(plan_scenarios())
def test_plan_invariants_hold_on_random_scenarios(data: dict[str, Any]) -> None:
    result = simulate(data, explain=True)
    check_plans(data, result)
    for job_id, rows in result["pending"].items():
        job = next(j for j in data["jobs"] if j["id"] == job_id)
        for pref, row in zip(job["preferences"], rows, strict=True):
            is_plan_code = row["reason"].startswith("plan_")
            assert is_plan_code == ("plan" in pref)
