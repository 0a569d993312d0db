"""Property-based checks over random queues, shares, jobs and actions.

Each generated scenario is run through the public runner; its event stream is then
replayed against a shadow accounting that checks, decision by decision, the invariants
of docs/scheduling.md. Profiles: ``HYPOTHESIS_PROFILE=thorough`` runs many more examples.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.simulate import run

settings.register_profile(
    "engine-default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "engine-default")

TYPES = ["ml.g5.xlarge", "ml.p4d.24xlarge", "ml.c5.xlarge"]
POLICIES = ["RESERVE", "LEND", "LEND_AND_BORROW"]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    n_types = draw(st.integers(1, 3))
    types = [
        {
            "name": TYPES[i],
            "capacity": draw(st.integers(0, 6)),
            "speed": draw(st.sampled_from([1, 1, 1.5, 0.5, 2])),
        }
        for i in range(n_types)
    ]
    names = [t["name"] for t in types]
    shares = []
    for s in range(draw(st.integers(1, 4))):
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=n_types, unique=True))
        shares.append(
            {
                "name": f"s{s}",
                "policy": draw(st.sampled_from(POLICIES)),
                "borrow_limit": draw(st.sampled_from([-1, 0, 50, 100, 200])),
                "limits": {t: draw(st.integers(0, 4)) for t in chosen},
                "in_share_preemption": draw(st.booleans()),
                "preemption_retries": draw(st.sampled_from([None, 0, 1, 3])),
            }
        )
    jobs = []
    for j in range(draw(st.integers(1, 14))):
        prefs = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
        jobs.append(
            {
                "id": f"j{j}",
                "share": draw(st.sampled_from(shares))["name"],
                "submit_at": draw(st.integers(0, 40)),
                "priority": draw(st.integers(0, 4)),
                "preferences": [
                    {"instance_type": t, "count": draw(st.integers(1, 4))} for t in prefs
                ],
                "duration": draw(st.integers(1, 60)),
                "checkpoint_interval": draw(st.sampled_from([None, 5, 10])),
                "restart_overhead": draw(st.integers(0, 3)),
                "max_pending": draw(st.sampled_from([None, None, 5, 30])),
            }
        )
    actions: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 5))):
        at = draw(st.integers(0, 60))
        kind = draw(st.sampled_from(["set_priority", "set_share", "set_capacity", "cancel"]))
        if kind == "set_priority":
            actions.append(
                {
                    "at": at,
                    "type": kind,
                    "job": draw(st.sampled_from(jobs))["id"],
                    "priority": draw(st.integers(0, 4)),
                }
            )
        elif kind == "cancel":
            actions.append({"at": at, "type": kind, "job": draw(st.sampled_from(jobs))["id"]})
        elif kind == "set_capacity":
            actions.append(
                {
                    "at": at,
                    "type": kind,
                    "instance_type": draw(st.sampled_from(names)),
                    "capacity": draw(st.integers(0, 6)),
                }
            )
        else:
            target = draw(st.sampled_from(shares))["name"]
            change: dict[str, Any] = {"at": at, "type": kind, "share": target}
            if draw(st.booleans()):
                chosen = draw(
                    st.lists(st.sampled_from(names), min_size=1, max_size=n_types, unique=True)
                )
                change["limits"] = {t: draw(st.integers(0, 4)) for t in chosen}
            if draw(st.booleans()):
                change["policy"] = draw(st.sampled_from(POLICIES))
            if draw(st.booleans()):
                change["borrow_limit"] = draw(st.sampled_from([-1, 0, 100]))
            if draw(st.booleans()):
                change["in_share_preemption"] = draw(st.booleans())
            actions.append(change)
    return {"instance_types": types, "shares": shares, "jobs": jobs, "actions": actions}


class Shadow:
    """Independent accounting rebuilt from the event stream."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.capacity = {t["name"]: t["capacity"] for t in data["instance_types"]}
        self.shares = {s["name"]: dict(s) for s in data["shares"]}
        for s in self.shares.values():
            s.setdefault("policy", "RESERVE")
            s.setdefault("borrow_limit", -1)
            s.setdefault("in_share_preemption", False)
        self.jobs = {j["id"]: dict(j) for j in data["jobs"]}
        self.usage: dict[tuple[str, str], int] = {}
        self.running: dict[str, tuple[str, int]] = {}

    def limit(self, share: str, itype: str) -> int:
        return int(self.shares[share]["limits"].get(itype, 0))

    def used(self, share: str, itype: str) -> int:
        return self.usage.get((share, itype), 0)

    def total(self, itype: str) -> int:
        return sum(n for (_, t), n in self.usage.items() if t == itype)

    def free(self, share: str, itype: str) -> int:
        reserved = sum(
            max(0, self.limit(o, itype) - self.used(o, itype))
            for o, cfg in self.shares.items()
            if o != share and cfg["policy"] == "RESERVE"
        )
        return max(0, self.capacity[itype] - self.total(itype) - reserved)

    def fits(self, share: str, itype: str, count: int, own_only: bool) -> bool:
        cfg = self.shares[share]
        if itype not in cfg["limits"] or count > self.free(share, itype):
            return False
        lim = self.limit(share, itype)
        after = self.used(share, itype) + count
        if after <= lim:
            return True
        if own_only or cfg["policy"] != "LEND_AND_BORROW":
            return False
        if cfg["borrow_limit"] == -1:
            return True
        return after - lim <= lim * cfg["borrow_limit"] // 100

    def add(self, job_id: str, itype: str, count: int) -> None:
        share = self.jobs[job_id]["share"]
        self.usage[(share, itype)] = self.used(share, itype) + count
        self.running[job_id] = (itype, count)

    def remove(self, job_id: str) -> None:
        itype, count = self.running.pop(job_id)
        share = self.jobs[job_id]["share"]
        self.usage[(share, itype)] -= count


def replay_and_check(data: dict[str, Any], result: dict[str, Any]) -> None:
    shadow = Shadow(data)
    actions = sorted(enumerate(data.get("actions", [])), key=lambda a: (a[1]["at"], a[0]))
    applied = 0
    victims: list[tuple[str, str]] = []  # (job, reason) of the placement being built

    def apply_actions(until: int, cancelled: str | None = None) -> None:
        """Apply actions up to ``until``; for a ``cancelled`` event only up to that
        cancellation: actions at one instant happen in file order, so a capacity drop
        listed after it has not happened yet when it is cancelled."""
        nonlocal applied
        while applied < len(actions) and actions[applied][1]["at"] <= until:
            action = actions[applied][1]
            applied += 1
            if action["type"] == "set_priority":
                shadow.jobs[action["job"]]["priority"] = action["priority"]
            elif action["type"] == "set_capacity":
                shadow.capacity[action["instance_type"]] = action["capacity"]
            elif action["type"] == "set_share":
                cfg = shadow.shares[action["share"]]
                for key, value in action.items():
                    if key not in ("at", "type", "share"):
                        cfg[key] = value
            elif (
                cancelled is not None
                and action["type"] == "cancel"
                and action["job"] == cancelled
                and action["at"] == until
            ):
                return

    for event in result["events"]:
        at, kind, job_id = event["at"], event["type"], event["job"]
        if kind != "completed":
            apply_actions(at, job_id if kind == "cancelled" else None)
        if kind in ("completed", "cancelled") and job_id in shadow.running:
            shadow.remove(job_id)
        elif kind == "preempted":
            itype = event["instance_type"]
            assert shadow.running[job_id][0] == itype
            owner = shadow.jobs[job_id]["share"]
            if event["reason"] == "reclaim":
                # the victim's share is still borrowing once earlier victims are set aside
                assert shadow.used(owner, itype) > shadow.limit(owner, itype)
                assert shadow.jobs[event["by"]]["share"] != owner
            elif event["reason"] == "priority":
                by = shadow.jobs[event["by"]]
                assert by["share"] == owner
                assert shadow.shares[owner]["in_share_preemption"]
                assert shadow.jobs[job_id]["priority"] < by["priority"]
            shadow.remove(job_id)
            if event["by"] is not None:
                victims.append((job_id, event["reason"]))
        elif kind == "admitted":
            itype, count = event["instance_type"], event["count"]
            share = shadow.jobs[job_id]["share"]
            cfg = shadow.shares[share]
            assert job_id not in shadow.running  # never on two preferences at once
            lim = shadow.limit(share, itype)
            after = shadow.used(share, itype) + count
            assert event["borrowed"] == max(0, min(count, after - lim))
            assert shadow.fits(share, itype, count, own_only=False)
            if cfg["policy"] != "LEND_AND_BORROW":
                assert event["borrowed"] == 0
            if victims:
                assert count <= lim
                own_only = event["borrowed"] == 0
                if any(reason == "reclaim" for _, reason in victims):
                    assert event["borrowed"] == 0
                for victim, _ in victims:  # minimal: no victim could be given back
                    vshare = shadow.jobs[victim]["share"]
                    back = victim_count[victim]
                    shadow.usage[(vshare, itype)] = shadow.used(vshare, itype) + back
                    assert not shadow.fits(share, itype, count, own_only)
                    shadow.usage[(vshare, itype)] -= back
            victims.clear()
            shadow.add(job_id, itype, count)
            victim_count[job_id] = count
        for itype, capacity in shadow.capacity.items():
            if kind != "preempted":
                assert shadow.total(itype) <= capacity or kind == "failed"


victim_count: dict[str, int] = {}


@settings.get_profile(PROFILE)
@given(scenarios())
def test_invariants_hold_decision_by_decision(data: dict[str, Any]) -> None:
    victim_count.clear()
    result = run(data)
    replay_and_check(data, result)


@settings.get_profile(PROFILE)
@given(scenarios())
def test_deterministic_and_incremental_is_exact(data: dict[str, Any]) -> None:
    first = run(data, explain=True)
    assert run(data, explain=True) == first
    assert run(data, explain=True, incremental=False) == first
