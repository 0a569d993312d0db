"""Cycle ordering, the skip rule, repeated cycles, time, speed, checkpoints, timeouts,
order within an instant, configuration changes and cancellation."""

from __future__ import annotations

from tests.engine.helpers import (
    C,
    G,
    admitted,
    events,
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


def test_non_borrowing_tentative_placements_go_first() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("X", {G: 1}, LBB, borrow_limit=-1)],
        [job("xb", "X", [(G, 2)], prio=9), job("xo", "X", prio=1)],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "xo", G, 0)]
    assert reasons(result) == {"xb": ["no_lendable_capacity"]}


def test_skip_rule_then_next_cycle_at_the_same_instant() -> None:
    data = scenario(
        [itype(G, 3)],
        [share("A", {G: 1}, LBB, borrow_limit=200)],
        [job("hi", "A", prio=3), job("lo", "A", prio=1)],
    )
    assert admitted(simulate(data)) == [(0, "hi", G, 0), (0, "lo", G, 1)]


def test_priority_then_submission_then_id_as_string() -> None:
    data = scenario(
        [itype(G, 0)],
        [share("A", {G: 4}, "LEND")],
        [
            job("9", "A", at=1),
            job("10", "A", at=1),
            job("early", "A", at=0),
            job("urgent", "A", at=2, prio=7),
        ],
        actions=[{"at": 5, "type": "set_capacity", "instance_type": G, "capacity": 4}],
    )
    assert [a[1] for a in admitted(simulate(data))] == ["urgent", "early", "10", "9"]


def test_a_job_that_cannot_fit_does_not_block_the_ones_behind() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("A", {G: 4}, "LEND")],
        [job("big", "A", [(G, 3)], prio=9), job("small", "A", prio=1)],
    )
    assert admitted(simulate(data)) == [(0, "small", G, 0)]


def test_speed_ceil_and_exact_arithmetic() -> None:
    data = scenario(
        [itype(G, 1, speed=1.5), itype("ml.g5.2xlarge", 1, speed=0.1)],
        [share("A", {G: 1, "ml.g5.2xlarge": 1}, "LEND")],
        [job("a", "A", duration=100), job("b", "A", [("ml.g5.2xlarge", 1)], duration=3)],
        until=None,
    )
    result = simulate(data)
    assert result["jobs"]["a"]["finished_at"] == 67
    assert result["jobs"]["b"]["finished_at"] == 30


def test_lost_work_checkpoints_overhead_and_recomputed() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("O", {G: 1}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [
            job("x", "X", duration=100, checkpoint_interval=30, restart_overhead=5),
            job("o", "O", at=50, duration=20),
        ],
        until=None,
    )
    result = simulate(data)
    assert events(result, "preempted")[0]["lost_work"] == 20
    assert result["jobs"]["x"] == {
        "state": "SUCCEEDED",
        "started_at": 0,
        "finished_at": 70 + 5 + 70,
        "wait": 0,
        "preemptions": 1,
        "recomputed": 20,
        "preference": 0,
    }


def test_no_checkpoint_loses_the_whole_run() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("O", {G: 1}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [job("x", "X", duration=100), job("o", "O", at=40, duration=10)],
        until=None,
    )
    result = simulate(data)
    assert result["jobs"]["x"]["recomputed"] == 40
    assert result["jobs"]["x"]["finished_at"] == 150


def test_max_pending_only_accelerated_and_only_before_first_start() -> None:
    data = scenario(
        [itype(G, 1), itype(C, 1)],
        [share("O", {G: 1, C: 1}, "LEND"), share("X", {G: 0}, LBB, borrow_limit=-1)],
        [
            job("o1", "O", [(C, 1)], prio=5),
            job("cpu", "O", [(C, 1)], max_pending=5),
            job("x", "X", max_pending=20),
            job("o2", "O", at=10, duration=30),
            job("g", "X", max_pending=15, at=1),
        ],
        until=100,
    )
    result = simulate(data)
    # x started at 0, was reclaimed at 10, waits past its deadline: no timeout;
    # g (accelerated) times out at 16; cpu (CPU only) waits forever.
    assert [e for e in trace(result) if e[1] == "timed_out"] == [(16, "timed_out", "g")]
    assert result["jobs"]["cpu"]["state"] == "PENDING"
    assert result["jobs"]["x"]["state"] == "RUNNING"


def test_cycles_run_before_timeouts_at_the_deadline() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("A", {G: 1}, "LEND")],
        [job("a", "A", duration=10), job("b", "A", max_pending=10), job("c", "A", max_pending=10)],
        until=None,
    )
    result = simulate(data)
    assert [e for e in trace(result) if e[0] == 10] == [
        (10, "completed", "a"),
        (10, "admitted", "b"),
        (10, "timed_out", "c"),
    ]


def test_order_within_an_instant() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("A", {G: 2}, "LEND")],
        [
            job("a", "A", duration=10),
            job("b", "A", duration=50),
            job("n1", "A", at=10),
            job("n2", "A", at=10),
        ],
        actions=[{"at": 10, "type": "cancel", "job": "b"}],
    )
    assert [e for e in trace(simulate(data)) if e[0] == 10] == [
        (10, "completed", "a"),
        (10, "cancelled", "b"),
        (10, "admitted", "n1"),
        (10, "admitted", "n2"),
    ]


def test_completions_at_one_instant_follow_file_order() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("A", {G: 2}, "LEND")],
        [job("z", "A", duration=10), job("a", "A", at=5, duration=5)],
        until=None,
    )
    assert trace(simulate(data))[-2:] == [(10, "completed", "z"), (10, "completed", "a")]


def test_until_is_inclusive_and_defaults_to_the_last_event() -> None:
    base = scenario(
        [itype(G, 1)], [share("A", {G: 1}, "LEND")], [job("a", "A", duration=30)], until=30
    )
    assert trace(simulate(base))[-1] == (30, "completed", "a")
    base["until"] = 29
    assert simulate(base)["jobs"]["a"]["state"] == "RUNNING"
    del base["until"]
    assert simulate(base)["jobs"]["a"]["finished_at"] == 30


def test_cancel_pending_and_running() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("A", {G: 1}, "LEND")],
        [job("run", "A"), job("wait", "A")],
        actions=[
            {"at": 5, "type": "cancel", "job": "wait"},
            {"at": 7, "type": "cancel", "job": "run"},
        ],
    )
    result = simulate(data)
    assert trace(result) == [
        (0, "admitted", "run"),
        (5, "cancelled", "wait"),
        (7, "cancelled", "run"),
    ]
    assert result["jobs"]["wait"]["started_at"] is None
    assert result["jobs"]["run"]["finished_at"] == 7


def test_priority_change_enables_in_share_preemption() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("A", {G: 1}, "LEND", in_share_preemption=True)],
        [job("a", "A", prio=3), job("b", "A", prio=1)],
        actions=[{"at": 20, "type": "set_priority", "job": "b", "priority": 4}],
    )
    assert preempted(simulate(data)) == [(20, "a", "priority", "b")]


def test_limit_cut_stops_nothing_but_opens_reclaim() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("A", {G: 2}, "LEND"), share("B", {G: 1}, "LEND")],
        [job("a1", "A"), job("a2", "A"), job("b1", "B", at=20)],
        actions=[{"at": 10, "type": "set_share", "share": "A", "limits": {G: 1}}],
    )
    result = simulate(data)
    assert preempted(result) == [(20, "a2", "reclaim", "b1")]


def test_removed_type_counts_as_limit_zero_for_running_jobs() -> None:
    data = scenario(
        [itype(G, 1), itype(C, 1)],
        [share("A", {G: 1, C: 1}, "LEND"), share("B", {G: 1}, "LEND")],
        [job("a1", "A"), job("a2", "A", at=15), job("b1", "B", at=20)],
        actions=[{"at": 10, "type": "set_share", "share": "A", "limits": {C: 1}}],
    )
    result = simulate(data)
    assert preempted(result) == [(20, "a1", "reclaim", "b1")]
    assert reasons(result) == {"a1": ["no_limit_for_type"], "a2": ["no_limit_for_type"]}


def test_set_share_policy_and_borrow_limit() -> None:
    data = scenario(
        [itype(G, 3)],
        [share("A", {G: 1}, "LEND")],
        [job("a1", "A"), job("a2", "A"), job("a3", "A")],
        actions=[{"at": 10, "type": "set_share", "share": "A", "policy": LBB, "borrow_limit": 100}],
    )
    result = simulate(data)
    assert admitted(result) == [(0, "a1", G, 0), (10, "a2", G, 1)]
    assert reasons(result) == {"a3": ["borrow_limit_reached"]}


def test_jobs_output_fields() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("A", {G: 1}, "LEND")],
        [job("a", "A", duration=10), job("b", "A", at=3, duration=10)],
        until=None,
    )
    assert simulate(data)["jobs"]["b"] == {
        "state": "SUCCEEDED",
        "started_at": 10,
        "finished_at": 20,
        "wait": 7,
        "preemptions": 0,
        "recomputed": 0,
        "preference": 0,
    }
