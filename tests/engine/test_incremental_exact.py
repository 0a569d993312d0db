"""The incremental engine against full re-examination on busy, seeded random traces.

Hypothesis scenarios are small; these are mid-sized (hundreds of jobs, a queue near its
capacity) so that many cycles run on states where only part of the queue changed, with
priority changes of running and pending jobs, share changes and capacity drops.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from bench.engine import oversubscribed_scenario
from scheduler.simulate import run

TYPES = ["ml.g5.xlarge", "ml.p4d.24xlarge", "ml.c5.xlarge"]


def busy_trace(seed: int, n_jobs: int = 250) -> dict[str, Any]:
    rng = random.Random(seed)
    shares = []
    for i in range(6):
        chosen = rng.sample(TYPES, rng.randint(1, 3))
        shares.append(
            {
                "name": f"s{i}",
                "policy": rng.choice(["RESERVE", "LEND", "LEND_AND_BORROW"]),
                "borrow_limit": rng.choice([-1, 0, 50, 100, 200]),
                "limits": {t: rng.randint(0, 6) for t in chosen},
                "in_share_preemption": rng.random() < 0.5,
                "preemption_retries": rng.choice([None, 1, 3]),
            }
        )
    capacity = {t: sum(s["limits"].get(t, 0) for s in shares) * 3 // 4 + 1 for t in TYPES}
    jobs = []
    t = 0
    for i in range(n_jobs):
        t += rng.choice([0, 1, 2, 5, 10])
        share = rng.choice(shares)
        types = sorted(set(share["limits"]) | {rng.choice(TYPES)})
        prefs = rng.sample(types, rng.randint(1, len(types)))
        jobs.append(
            {
                "id": f"j{i}",
                "share": share["name"],
                "submit_at": t,
                "priority": rng.randint(0, 9),
                "preferences": [
                    {"instance_type": p, "count": rng.choice([1, 1, 2, 3])} for p in prefs
                ],
                "duration": rng.randint(5, 120),
                "checkpoint_interval": rng.choice([None, 7, 30]),
                "restart_overhead": rng.choice([0, 3]),
                "max_pending": rng.choice([None, None, 200]),
            }
        )
    actions: list[dict[str, Any]] = []
    for _ in range(25):
        at = rng.randint(0, t)
        kind = rng.choice(["set_priority", "set_priority", "set_share", "set_capacity", "cancel"])
        if kind == "set_priority":
            job = rng.choice(jobs)
            actions.append(
                {"at": at, "type": kind, "job": job["id"], "priority": rng.randint(0, 9)}
            )
        elif kind == "cancel":
            actions.append({"at": at, "type": kind, "job": rng.choice(jobs)["id"]})
        elif kind == "set_share":
            share = rng.choice(shares)
            actions.append(
                {
                    "at": at,
                    "type": kind,
                    "share": share["name"],
                    "limits": {k: rng.randint(0, 6) for k in share["limits"]},
                    "policy": rng.choice(["RESERVE", "LEND", "LEND_AND_BORROW"]),
                }
            )
        else:
            name = rng.choice(TYPES)
            actions.append(
                {
                    "at": at,
                    "type": kind,
                    "instance_type": name,
                    "capacity": max(0, capacity[name] + rng.randint(-3, 3)),
                }
            )
    return {
        "instance_types": [{"name": n, "capacity": c} for n, c in capacity.items()],
        "shares": shares,
        "jobs": jobs,
        "actions": actions,
    }


@pytest.mark.parametrize("seed", range(12))
def test_incremental_equals_full_on_busy_traces(seed: int) -> None:
    data = busy_trace(seed)
    result = run(data, explain=True)
    assert run(data, explain=True, incremental=False) == result


def test_busy_traces_exercise_preemption() -> None:
    kinds = [e["type"] for seed in range(4) for e in run(busy_trace(seed))["events"]]
    assert "preempted" in kinds and "admitted" in kinds


@pytest.mark.parametrize(("load", "seed"), [(1.0, 11), (1.3, 12), (2.0, 13), (1.3, 14)])
def test_incremental_equals_full_on_oversubscribed_traces(load: float, seed: int) -> None:
    """The bench's oversubscribed generator, scaled down so that the backlog is as deep
    relative to capacity (hundreds of jobs queue behind a few dozen instances)."""
    data = oversubscribed_scenario(350, load, seed=seed, scale=0.05)
    result = run(data, explain=True)
    assert run(data, explain=True, incremental=False) == result
    backlog = sum(1 for job in result["jobs"].values() if job["state"] == "PENDING")
    assert backlog > 50  # it really queues


@pytest.mark.parametrize(("load", "seed"), [(1.3, 21), (2.0, 22), (3.0, 23)])
def test_incremental_equals_full_on_deep_varied_traces(load: float, seed: int) -> None:
    """The bench's deep, varied trace (hour-long durations, lists of up to five
    preferences, many of them on types where the share has no limit), scaled down: the
    walk skips whole classes there before queueing them, and must decide the same."""
    data = oversubscribed_scenario(350, load, seed=seed, scale=0.05, mean_hours=1.0, max_prefs=5)
    result = run(data, explain=True)
    assert run(data, explain=True, incremental=False) == result
    backlog = sum(1 for job in result["jobs"].values() if job["state"] == "PENDING")
    assert backlog > 50  # it really queues


@pytest.mark.parametrize("seed", range(4))
def test_a_share_given_a_limit_on_a_new_type_runs_its_waiting_jobs_there(seed: int) -> None:
    """A job's preference on a type its share has no limit for is not indexed there;
    when the share gains a limit on that type, the job is indexed there at once and
    runs as full re-examination says, and when it loses one again, it waits."""
    data = busy_trace(seed, n_jobs=120)
    rng = random.Random(seed)
    for share in data["shares"]:
        missing = [t for t in TYPES if t not in share["limits"]]
        if not missing:
            continue
        gained = dict(share["limits"], **{rng.choice(missing): rng.randint(1, 6)})
        data["actions"].append(
            {
                "at": rng.randint(0, 150),
                "type": "set_share",
                "share": share["name"],
                "limits": gained,
            }
        )
        data["actions"].append(
            {
                "at": rng.randint(150, 300),
                "type": "set_share",
                "share": share["name"],
                "limits": share["limits"],
            }
        )
    assert run(data, incremental=True) == run(data, incremental=False)


def test_a_new_limit_starts_a_job_that_waited_for_it() -> None:
    """The plain case: a job asks only for a type its share has no limit for; once the
    share has one, it starts at that instant."""
    data = {
        "instance_types": [
            {"name": "ml.g5.xlarge", "capacity": 4},
            {"name": "ml.p4d.24xlarge", "capacity": 4},
        ],
        "shares": [{"name": "s", "limits": {"ml.g5.xlarge": 1}}],
        "jobs": [
            {
                "id": "j",
                "share": "s",
                "submit_at": 0,
                "priority": 1,
                "preferences": [{"instance_type": "ml.p4d.24xlarge", "count": 2}],
                "duration": 50,
            }
        ],
        "actions": [
            {
                "at": 10,
                "type": "set_share",
                "share": "s",
                "limits": {"ml.g5.xlarge": 1, "ml.p4d.24xlarge": 2},
            }
        ],
    }
    for incremental in (True, False):
        result = run(data, incremental=incremental)
        assert result["jobs"]["j"]["started_at"] == 10
