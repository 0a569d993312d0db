"""Starts on a share's entitlement alone, checked against the engine itself played
forward with lending switched off (the scenario runner, a ``set_share`` to ``LEND`` for
every share that borrows), and the exposure of runs on borrowed capacity."""

from __future__ import annotations

import random
from typing import Any

import pytest

from scheduler.engine import Engine, JobState
from scheduler.engine.exposure import exposures, lending_now
from scheduler.engine.forecast import play_entitled, play_forward
from scheduler.simulate import _build, run
from tests.engine.helpers import G, P, itype, job, scenario, share

NOW = 1  # no event falls at 1: every job is submitted at 0 and lasts 5 or more


def _engine_at_now(data: dict[str, Any]) -> Engine:
    """The engine as the live scheduler holds it at NOW: every job submitted at 0 and
    the cycles and timeouts of 0 played (what the scenario runner does at 0)."""
    engine, specs = _build(data)
    for spec in specs:
        engine.submit(spec.job)
    engine.schedule(0)
    engine.timeouts(0)
    return engine


def _finishes(engine: Engine) -> dict[str, int | None]:
    return {j.id: engine.finish_time(j) for j in engine.jobs() if j.state is JobState.RUNNING}


def _played(data: dict[str, Any], waiting: set[str], lend: bool) -> tuple[dict[str, int], set[str]]:
    """First admission at or after NOW and timeouts of the ``waiting`` jobs when the
    scenario is played to its end, lending switched off at NOW unless ``lend``."""
    actions = [
        {"at": NOW, "type": "set_share", "share": s["name"], "policy": "LEND"}
        for s in data["shares"]
        if s["policy"] == "LEND_AND_BORROW" and not lend
    ]
    result = run({**data, "actions": actions, "until": None})
    starts: dict[str, int] = {}
    timed_out = set()
    for event in result["events"]:
        key = str(event["job"])
        if key not in waiting or event["at"] < NOW or key in starts or key in timed_out:
            continue
        if event["type"] == "admitted":
            starts[key] = event["at"]
        elif event["type"] == "timed_out":
            timed_out.add(key)
    return starts, timed_out


def _random_scenario(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    policies = ["RESERVE", "LEND", "LEND_AND_BORROW", "LEND_AND_BORROW"]
    shares = [
        share(
            name,
            {G: rng.randint(0, 3), P: rng.randint(1, 2)},
            rng.choice(policies),
            borrow_limit=rng.choice([-1, 100, 200]),
            in_share_preemption=rng.random() < 0.5,
            preemption_retries=rng.choice([None, 1, 3]),
        )
        for name in ("A", "B", "C", "D")
    ]
    jobs = []
    for index in range(rng.randint(10, 30)):
        prefs = [(G, rng.randint(1, 4))]
        if rng.random() < 0.4:
            prefs.append((P, rng.randint(1, 3)))
        extra: dict[str, Any] = {}
        if rng.random() < 0.3:
            extra["checkpoint_interval"] = rng.randint(2, 10)
            extra["restart_overhead"] = rng.randint(0, 4)
        if rng.random() < 0.2:
            extra["max_pending"] = rng.randint(5, 80)
        if rng.random() < 0.1:
            extra["may_borrow"] = False
        jobs.append(
            job(
                f"j{index}",
                rng.choice("ABCD"),
                prefs,
                prio=rng.randint(0, 3),
                duration=rng.randint(5, 60),
                **extra,
            )
        )
    types = [itype(G, rng.randint(4, 9)), itype(P, rng.randint(2, 5), speed=2)]
    return scenario(types, shares, jobs, until=None)


@pytest.mark.parametrize("seed", range(40))
def test_entitled_start_is_the_start_when_nobody_lends(seed: int) -> None:
    """Every pending job's entitled-only start (and timeout) is exactly when the engine,
    played on with every borrowing share switched to LEND, first admits it; the
    as-today forecast likewise matches the engine played on unchanged."""
    data = _random_scenario(seed)
    engine = _engine_at_now(data)
    waiting = {j.id for j in engine.pending_jobs()}
    today = play_forward(engine.copy(), NOW, _finishes(engine))
    entitled = play_entitled(engine.copy(), NOW, _finishes(engine))
    assert _played(data, waiting, lend=True) == (today.starts, today.timed_out)
    assert _played(data, waiting, lend=False) == (entitled.starts, entitled.timed_out)
    assert entitled.entitled and "nobody lends" in entitled.basis()
    # a job that can never fit its share's own limits never starts there
    assert not entitled.never & set(entitled.starts)


def test_borrowed_start_now_own_start_later_or_never() -> None:
    """Capacity 4. A (LEND_AND_BORROW, limit 1) runs r (1, ends at 50); B lends its 3.
    Today p1 (1) and p2 (2) of A start now by borrowing. On A's entitlement alone p1
    starts when r ends, at 50; p2 asks 2 > A's limit 1: never on its own entitlement."""
    data = scenario(
        [itype(G, 4)],
        [share("A", {G: 1}, "LEND_AND_BORROW"), share("B", {G: 3}, "LEND")],
        [
            job("r", "A", [(G, 1)], prio=9, duration=50),
            job("p1", "A", [(G, 1)], prio=5, duration=10),
            job("p2", "A", [(G, 2)], prio=1, duration=10),
        ],
        until=None,
    )
    engine, specs = _build(data)
    engine.submit(specs[0].job)
    engine.schedule(0)  # r runs within A's limit
    for spec in specs[1:]:
        engine.submit(spec.job)
    finishes = _finishes(engine)
    entitled = play_entitled(engine.copy(), 0, finishes)
    engine.schedule(0)
    assert {j.id for j in engine.jobs() if j.state is JobState.RUNNING} == {"r", "p1", "p2"}
    assert entitled.starts == {"p1": 50}
    assert entitled.never == {"p2"}


def test_exposure_names_lender_its_demand_and_imminence() -> None:
    """A borrows 2 of B's idle entitlement (and none of capacity no share owns: limits
    add up to capacity). B then gets a pending job of 2 that fits its idle 3 but not the
    one free instance: every run of A on the type is exposed, lent by B, and a reclaim is
    imminent; the engine's next cycle indeed takes a2 back."""
    data = scenario(
        [itype(G, 4)],
        [share("A", {G: 1}, "LEND_AND_BORROW"), share("B", {G: 3}, "LEND")],
        [
            job("a1", "A", [(G, 1)], duration=50),
            job("a2", "A", [(G, 2)], duration=50),
            job("b1", "B", [(G, 2)], duration=50),
        ],
        until=None,
    )
    engine, specs = _build(data)
    for spec in specs[:2]:
        engine.submit(spec.job)
    engine.schedule(0)
    found = exposures(engine)
    assert set(found) == {"a1", "a2"}
    first = found["a2"]
    assert (first.share, first.share_borrowed, first.imminent) == ("A", 2, False)
    assert [(x.source, x.lender, x.instances) for x in first.lenders] == [("lender", "B", 2)]
    assert lending_now(engine)[G][0].lender == "B"
    engine.submit(specs[2].job)  # B's own work arrives
    found = exposures(engine)
    demand = found["a1"].lenders[0].demand
    assert demand is not None and (demand.jobs, demand.instances, demand.fitting) == (1, 2, 1)
    assert found["a1"].wanted_back_by == ("B",) and found["a1"].imminent
    engine.schedule(1)  # the engine agrees: B takes its capacity back
    assert engine.job("b1").state is JobState.RUNNING
    assert engine.job("a2").state is JobState.PENDING
    assert exposures(engine) == {}
