"""Fits with preemption: reclaim, in-share priority, victim order, minimal sets, retries,
lost capacity."""

from __future__ import annotations

from tests.engine.helpers import (
    G,
    admitted,
    itype,
    job,
    preempted,
    reasons,
    scenario,
    share,
    simulate,
    trace,
)

LBB = "LEND_AND_BORROW"


def test_reclaim_only_for_an_own_placement() -> None:
    # O is at its limit, so o2 would borrow: it may not reclaim from X.
    data = scenario(
        [itype(G, 2)],
        [share("O", {G: 1}, LBB, borrow_limit=-1), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [job("o1", "O"), job("x1", "X"), job("o2", "O", at=10)],
    )
    result = simulate(data)
    assert preempted(result) == []
    assert reasons(result) == {"o2": ["no_lendable_capacity"]}


def test_reclaim_stops_when_the_borrower_is_no_longer_borrowing() -> None:
    # X (limit 2) runs 4; o1 needs 3: after x4 and x3, X is at its limit, so x1/x2 are no
    # candidates and nothing is preempted.
    data = scenario(
        [itype(G, 4)],
        [share("O", {G: 3}, "LEND"), share("X", {G: 2}, LBB, borrow_limit=-1)],
        [job(f"x{i}", "X") for i in range(1, 5)] + [job("o1", "O", [(G, 3)], at=10)],
    )
    result = simulate(data)
    assert preempted(result) == []
    assert reasons(result) == {"o1": ["no_preemptible_victims"]}


def test_reclaim_takes_borrowers_until_the_owner_fits() -> None:
    data = scenario(
        [itype(G, 3)],
        [share("O", {G: 2}, "LEND"), share("X", {G: 1}, LBB, borrow_limit=-1)],
        [job("x1", "X"), job("x2", "X"), job("x3", "X"), job("o1", "O", [(G, 2)], at=10)],
    )
    result = simulate(data)
    assert preempted(result) == [(10, "x3", "reclaim", "o1"), (10, "x2", "reclaim", "o1")]
    assert admitted(result)[-1] == (10, "o1", G, 0)


def test_only_a_job_within_its_limit_may_preempt() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("O", {G: 1}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [job("x1", "X"), job("x2", "X"), job("o1", "O", [(G, 2)], at=10)],
    )
    result = simulate(data)
    assert preempted(result) == []
    assert reasons(result) == {"o1": ["own_quota_full"]}


def test_below_limit_reclaims_before_in_share_victims() -> None:
    data = scenario(
        [itype(G, 4)],
        [
            share("A", {G: 3}, "LEND", in_share_preemption=True),
            share("B", {G: 1}, LBB, borrow_limit=-1),
        ],
        [
            job("a_low", "A", [(G, 2)], prio=1),
            job("b1", "B"),
            job("b2", "B"),
            job("a_hi", "A", [(G, 1)], at=10, prio=5),
        ],
    )
    result = simulate(data)
    assert preempted(result) == [(10, "b2", "reclaim", "a_hi")]


def test_one_greedy_pass_then_give_back_in_reverse_pick_order() -> None:
    # a_hi (2) below A's limit: pass picks b2 (reclaim), then a_low (in-share); without
    # b2 the own placement still fits, so b2 is given back.
    data = scenario(
        [itype(G, 4)],
        [
            share("A", {G: 3}, "LEND", in_share_preemption=True),
            share("B", {G: 1}, LBB, borrow_limit=-1),
        ],
        [
            job("a_low", "A", [(G, 2)], prio=1),
            job("b1", "B"),
            job("b2", "B"),
            job("a_hi", "A", [(G, 2)], at=10, prio=5),
        ],
    )
    result = simulate(data)
    assert preempted(result) == [(10, "a_low", "priority", "a_hi")]
    assert admitted(result)[-1] == (10, "a_hi", G, 0)
    assert reasons(result) == {"a_low": ["own_quota_full"]}


def test_at_limit_only_in_share_victims_even_with_borrowers_around() -> None:
    data = scenario(
        [itype(G, 3)],
        [
            share("A", {G: 1}, LBB, borrow_limit=-1, in_share_preemption=True),
            share("B", {G: 1}, LBB, borrow_limit=-1),
        ],
        [
            job("a_low", "A", prio=1),
            job("b1", "B"),
            job("b2", "B"),
            job("a_hi", "A", at=10, prio=5),
        ],
    )
    result = simulate(data)
    assert preempted(result) == [(10, "a_low", "priority", "a_hi")]


def test_in_share_needs_strictly_lower_priority_and_the_switch_on() -> None:
    data = scenario(
        [itype(G, 2)],
        [
            share("on", {G: 1}, "LEND", in_share_preemption=True),
            share("off", {G: 1}, "LEND", in_share_preemption=False),
        ],
        [
            job("on1", "on", prio=5),
            job("off1", "off", prio=1),
            job("on2", "on", at=10, prio=5),
            job("off2", "off", at=10, prio=9),
        ],
    )
    result = simulate(data)
    assert preempted(result) == []
    assert reasons(result) == {"on2": ["own_quota_full"], "off2": ["own_quota_full"]}


def test_victim_order_most_recently_started_when_lost_work_ties() -> None:
    # z: checkpoints every 10 from t=0 -> lost 2 at t=12; a: started at 10, lost 2.
    data = scenario(
        [itype(G, 2)],
        [share("O", {G: 2}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [
            job("z", "X", checkpoint_interval=10),
            job("a", "X", at=10),
            job("o1", "O", at=12),
        ],
    )
    result = simulate(data)
    assert preempted(result) == [(12, "a", "reclaim", "o1")]
    assert result["events"][-2]["lost_work"] == 2


def test_victim_order_least_lost_work_before_start_time() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("O", {G: 2}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [job("early", "X", checkpoint_interval=5), job("late", "X", at=2), job("o1", "O", at=11)],
    )
    result = simulate(data)
    assert preempted(result) == [(11, "early", "reclaim", "o1")]  # lost 1 < 9


def test_victim_order_priority_first() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("O", {G: 2}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [job("hi", "X", prio=2, at=5), job("lo", "X", prio=1), job("o1", "O", at=10)],
    )
    assert preempted(simulate(data)) == [(10, "lo", "reclaim", "o1")]


def test_victim_order_id_descending_as_strings() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("O", {G: 2}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [job("10", "X"), job("9", "X"), job("o1", "O", at=10)],
    )
    assert preempted(simulate(data)) == [(10, "9", "reclaim", "o1")]


def test_minimal_set_gives_back_a_needless_small_victim() -> None:
    data = scenario(
        [itype(G, 3)],
        [share("O", {G: 2}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [
            job("small", "X", prio=1),
            job("big", "X", [(G, 2)], prio=2),
            job("o1", "O", [(G, 2)], at=10),
        ],
    )
    result = simulate(data)
    assert preempted(result) == [(10, "big", "reclaim", "o1")]


def test_retries_zero_fails_at_first_preemption_right_after_preempted() -> None:
    data = scenario(
        [itype(G, 1)],
        [
            share("O", {G: 1}, "LEND"),
            share("X", {G: 0}, LBB, borrow_limit=-1, preemption_retries=0),
        ],
        [job("x1", "X"), job("o1", "O", at=10)],
    )
    result = simulate(data)
    assert trace(result)[1:] == [
        (10, "preempted", "x1"),
        (10, "failed", "x1"),
        (10, "admitted", "o1"),
    ]
    assert result["events"][2]["reason"] == "preemption_retries_exhausted"
    assert result["jobs"]["x1"]["state"] == "FAILED"
    assert result["jobs"]["x1"]["finished_at"] == 10


def test_retries_null_is_unlimited() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("O", {G: 1}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [job("x1", "X")] + [job(f"o{i}", "O", at=10 * i, duration=5) for i in range(1, 6)],
        until=None,
    )
    result = simulate(data)
    assert result["jobs"]["x1"]["preemptions"] == 5
    assert result["jobs"]["x1"]["state"] == "SUCCEEDED"


def test_capacity_drop_borrowers_first_then_any_not_counted_for_retries() -> None:
    data = scenario(
        [itype(G, 4)],
        [
            share("O", {G: 2}, "LEND"),
            share("X", {G: 1}, LBB, borrow_limit=-1, preemption_retries=0),
        ],
        [
            job("o1", "O", prio=5),
            job("o2", "O", prio=5),
            job("x1", "X", prio=3),
            job("x2", "X", prio=3),
        ],
        actions=[{"at": 10, "type": "set_capacity", "instance_type": G, "capacity": 2}],
        until=20,
    )
    result = simulate(data)
    assert preempted(result) == [
        (10, "x2", "capacity_lost", None),
        (10, "x1", "capacity_lost", None),
    ]
    assert result["jobs"]["x1"]["state"] == "PENDING"
    assert result["jobs"]["x1"]["preemptions"] == 1


def test_capacity_drop_minimal_set() -> None:
    data = scenario(
        [itype(G, 3)],
        [share("A", {G: 3}, "LEND")],
        [job("small", "A", prio=1), job("big", "A", [(G, 2)], prio=2)],
        actions=[{"at": 10, "type": "set_capacity", "instance_type": G, "capacity": 1}],
        until=20,
    )
    result = simulate(data)
    assert preempted(result) == [(10, "big", "capacity_lost", None)]


def test_capacity_drop_within_usage_stops_nothing() -> None:
    data = scenario(
        [itype(G, 3)],
        [share("A", {G: 3}, "LEND")],
        [job("a1", "A")],
        actions=[{"at": 10, "type": "set_capacity", "instance_type": G, "capacity": 1}],
    )
    assert preempted(simulate(data)) == []


def test_preempted_job_requeues_and_may_run_on_another_preference_same_instant() -> None:
    from tests.engine.helpers import P

    data = scenario(
        [itype(G, 1), itype(P, 1)],
        [share("O", {G: 1}, "LEND"), share("X", {G: 0, P: 0}, LBB, borrow_limit=-1)],
        [job("x1", "X", [(G, 1), (P, 1)]), job("o1", "O", at=10)],
    )
    result = simulate(data)
    assert trace(result)[1:4] == [
        (10, "preempted", "x1"),
        (10, "admitted", "o1"),
        (10, "admitted", "x1"),
    ]
    assert result["jobs"]["x1"]["preference"] == 1
    assert result["jobs"]["x1"]["started_at"] == 0
