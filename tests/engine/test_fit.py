"""Fits without preemption: own, borrow, borrow limits, RESERVE idle, lending."""

from __future__ import annotations

from tests.engine.helpers import G, P, admitted, itype, job, reasons, scenario, share, simulate


def test_own_then_borrow_then_borrow_limit() -> None:
    data = scenario(
        [itype(G, 4)],
        [share("A", {G: 1}, "LEND_AND_BORROW", borrow_limit=100)],
        [job("a1", "A"), job("a2", "A"), job("a3", "A")],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "a1", G, 0), (0, "a2", G, 1)]
    assert reasons(result) == {"a3": ["borrow_limit_reached"]}


def test_borrow_limit_is_floor_of_limit_times_percent() -> None:
    # limit 3 at 70% -> floor(2.1) = 2 extra
    data = scenario(
        [itype(G, 10)],
        [share("A", {G: 3}, "LEND_AND_BORROW", borrow_limit=70)],
        [
            job("a1", "A", [(G, 3)], prio=3),
            job("a2", "A", [(G, 2)], prio=2),
            job("a3", "A", prio=1),
        ],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "a1", G, 0), (0, "a2", G, 2)]
    assert reasons(result) == {"a3": ["borrow_limit_reached"]}


def test_unlimited_borrow() -> None:
    data = scenario(
        [itype(G, 10)],
        [share("A", {G: 1}, "LEND_AND_BORROW", borrow_limit=-1)],
        [job("a1", "A", [(G, 9)])],
    )
    assert admitted(simulate(data)) == [(0, "a1", G, 8)]


def test_limit_zero_is_borrow_only_and_needs_unlimited() -> None:
    data = scenario(
        [itype(G, 4)],
        [
            share("capped", {G: 0}, "LEND_AND_BORROW", borrow_limit=500),
            share("open", {G: 0}, "LEND_AND_BORROW", borrow_limit=-1),
        ],
        [job("c1", "capped"), job("o1", "open")],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "o1", G, 1)]
    assert reasons(result) == {"c1": ["borrow_limit_reached"]}


def test_reserve_idle_is_never_lent() -> None:
    data = scenario(
        [itype(G, 3)],
        [share("R", {G: 2}), share("X", {G: 0}, "LEND_AND_BORROW", borrow_limit=-1)],
        [job("x1", "X", [(G, 2)]), job("x2", "X", [(G, 1)], at=1), job("r1", "R", [(G, 2)], at=5)],
    )
    result = simulate(data)
    # only 1 of 3 is lendable: R keeps its 2 idle; R then starts without preempting anyone
    assert admitted(result) == [(1, "x2", G, 1), (5, "r1", G, 0)]
    assert reasons(result) == {"x1": ["no_lendable_capacity"]}


def test_reserve_share_uses_its_own_idle() -> None:
    data = scenario([itype(G, 2)], [share("R", {G: 2})], [job("r1", "R", [(G, 2)])])
    assert admitted(simulate(data)) == [(0, "r1", G, 0)]


def test_capacity_no_share_owns_is_lendable() -> None:
    data = scenario(
        [itype(G, 5)],
        [share("L", {G: 1}, "LEND"), share("X", {G: 1}, "LEND_AND_BORROW", borrow_limit=-1)],
        [job("x1", "X", [(G, 5)])],
    )
    assert admitted(simulate(data)) == [(0, "x1", G, 4)]


def test_lend_and_reserve_never_borrow() -> None:
    data = scenario(
        [itype(G, 6)],
        [share("L", {G: 1}, "LEND"), share("R", {G: 1}, "RESERVE")],
        [job("l1", "L"), job("l2", "L"), job("r1", "R"), job("r2", "R")],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "l1", G, 0), (0, "r1", G, 0)]
    assert reasons(result) == {"l2": ["own_quota_full"], "r2": ["own_quota_full"]}


def test_type_without_limit_is_unusable_and_next_preference_runs() -> None:
    data = scenario(
        [itype(G, 2), itype(P, 2)],
        [share("A", {G: 1}, "LEND_AND_BORROW", borrow_limit=-1)],
        [job("a1", "A", [(P, 1), (G, 1)]), job("a2", "A", [(P, 1)])],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "a1", G, 0)]
    assert result["jobs"]["a1"]["preference"] == 1
    assert reasons(result) == {"a2": ["no_limit_for_type"]}


def test_capacity_unavailable_when_queue_has_fewer_than_asked() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("A", {G: 5}, "LEND")],
        [job("a1", "A", [(G, 3)])],
    )
    assert reasons(simulate(data)) == {"a1": ["capacity_unavailable"]}


def test_oversubscribed_limits_honoured_as_capacity_allows() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("A", {G: 2}, "LEND"), share("B", {G: 2}, "LEND")],
        [job("a1", "A", [(G, 2)]), job("b1", "B", [(G, 1)], at=1)],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "a1", G, 0)]
    assert reasons(result) == {"b1": ["no_preemptible_victims"]}


def test_common_count_applies_to_every_preference() -> None:
    data = scenario(
        [itype(G, 1), itype(P, 3)],
        [share("A", {G: 2, P: 2}, "LEND")],
        [
            {
                "id": "c",
                "share": "A",
                "submit_at": 0,
                "priority": 1,
                "count": 2,
                "duration": 10,
                "preferences": [{"instance_type": G}, {"instance_type": P}],
            }
        ],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "c", P, 0)]
    assert result["events"][0]["count"] == 2
