"""Interruption classes and constrained fallback (docs/scheduling.md#interruption-classes
and #deadline-and-budget), one rule per test, through the public scenario runner (which
also holds the incremental engine to the full re-examination, see ``simulate``).

The fields: ``may_borrow`` (false: the job never borrows), ``preemptible`` (false: never
an in-share ``priority`` victim), ``deadline`` and ``max_cost`` (which preferences are
eligible), and a preference's expected ``runtime``.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.engine import Engine, InstanceType, Job, Preference, ShareConfig
from scheduler.simulate import ScenarioError, run
from tests.engine.helpers import C, G, P, events, itype, job, scenario, share, simulate


def _pending(result: dict[str, Any], job_id: str) -> list[str]:
    return [r["reason"] if isinstance(r, dict) else r for r in result["pending"][job_id]]


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        run(data)
    return caught.value.problems


# ---------------------------------------------------------------------------- validation


def _one_job(**fields: Any) -> dict[str, Any]:
    return scenario([itype(G, 2)], [share("a", {G: 2})], [job("j", "a", **fields)])


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"deadline": -1}, "jobs[0].deadline"),
        ({"deadline": 1.5}, "jobs[0].deadline"),
        ({"deadline": "08:00"}, "jobs[0].deadline"),
        ({"deadline": True}, "jobs[0].deadline"),
        ({"max_cost": -0.01}, "jobs[0].max_cost"),
        ({"max_cost": "400"}, "jobs[0].max_cost"),
        ({"max_cost": False}, "jobs[0].max_cost"),
        ({"may_borrow": "no"}, "jobs[0].may_borrow"),
        ({"may_borrow": None}, "jobs[0].may_borrow"),
        ({"preemptible": 0}, "jobs[0].preemptible"),
        ({"duration": None}, "jobs[0].duration"),
        ({"duration": 0}, "jobs[0].duration"),
    ],
)
def test_a_wrong_job_field_is_an_error_on_its_path(fields: dict[str, Any], path: str) -> None:
    problems = _problems(_one_job(**fields))
    assert [p.split(":")[0] for p in problems] == [path]


@pytest.mark.parametrize("runtime", [0, -5, 1.5, "1h", True])
def test_a_wrong_runtime_is_an_error_on_its_preference(runtime: object) -> None:
    data = _one_job()
    data["jobs"][0]["preferences"] = [
        {"instance_type": G, "count": 1},
        {"instance_type": G, "count": 2, "runtime": runtime},
    ]
    assert [p.split(":")[0] for p in _problems(data)] == ["jobs[0].preferences[1].runtime"]


def test_null_means_absent_and_duration_is_optional() -> None:
    data = _one_job(deadline=None, max_cost=None, may_borrow=True, preemptible=False)
    del data["jobs"][0]["duration"]
    data["jobs"][0]["preferences"][0]["runtime"] = None
    result = simulate(data)
    assert result["jobs"]["j"]["state"] == "RUNNING"  # no duration, no runtime: runs on
    assert result["jobs"]["j"]["started_at"] == 0


def test_a_zero_budget_and_a_deadline_at_zero_are_valid() -> None:
    assert simulate(_one_job(max_cost=0, deadline=0, submit_at=0))["jobs"]["j"]["state"]


# ---------------------------------------------------------------------------- may_borrow


def _lender_and_borrower(borrower: dict[str, Any], **borrower_share: Any) -> dict[str, Any]:
    return scenario(
        [itype(G, 4)],
        [
            share("lender", {G: 3}, "LEND"),
            share("b", {G: 1}, "LEND_AND_BORROW", **borrower_share),
        ],
        [job("first", "b"), borrower],
    )


def test_a_job_that_may_borrow_borrows_idle_capacity() -> None:
    result = simulate(_lender_and_borrower(job("second", "b")))
    assert events(result, "admitted")[1] == {
        "at": 0,
        "type": "admitted",
        "job": "second",
        "instance_type": G,
        "count": 1,
        "preference": 0,
        "borrowed": 1,
    }


def test_may_borrow_false_never_borrows_and_reads_own_quota_full() -> None:
    result = simulate(_lender_and_borrower(job("second", "b", may_borrow=False)), explain=True)
    assert [e["job"] for e in events(result, "admitted")] == ["first"]
    assert _pending(result, "second") == ["own_quota_full"]
    assert "marked not to borrow" in result["pending"]["second"][0]["message"]


def test_may_borrow_false_runs_within_its_limit() -> None:
    data = scenario(
        [itype(G, 4)],
        [share("lender", {G: 2}, "LEND"), share("b", {G: 2}, "LEND_AND_BORROW")],
        [job("first", "b", may_borrow=False), job("second", "b", may_borrow=False)],
    )
    result = simulate(data)
    assert [(e["job"], e["borrowed"]) for e in events(result, "admitted")] == [
        ("first", 0),
        ("second", 0),
    ]


def test_may_borrow_false_does_not_preempt_in_share_to_borrow() -> None:
    # the share holds its limit of 2; an ordinary job of priority 5 asking 2 would stop
    # the priority-1 job and borrow one of the lender's idle instances; a job that may
    # not borrow cannot: a placement beyond the limit is closed to it even with victims
    data = scenario(
        [itype(G, 3)],
        [
            share("lender", {G: 2}, "LEND"),
            share("b", {G: 2}, "LEND_AND_BORROW", in_share_preemption=True),
        ],
        [
            job("low", "b", prio=1),
            job("keep", "b", prio=9),
            job("big", "b", [(G, 2)], at=10, prio=5, may_borrow=False),
        ],
    )
    result = simulate(data)
    assert events(result, "preempted") == []
    assert _pending(result, "big") == ["own_quota_full"]
    data["jobs"][2]["may_borrow"] = True
    result = simulate(data)
    assert [e["job"] for e in events(result, "preempted")] == ["low"]
    assert events(result, "admitted")[-1]["borrowed"] == 1


def test_may_borrow_false_still_preempts_in_share_within_its_limit() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("b", {G: 2}, "LEND_AND_BORROW", in_share_preemption=True)],
        [
            job("low", "b", [(G, 2)], prio=1),
            job("urgent", "b", [(G, 2)], at=10, prio=5, may_borrow=False),
        ],
    )
    result = simulate(data)
    assert [(e["job"], e["reason"], e["by"]) for e in events(result, "preempted")] == [
        ("low", "priority", "urgent")
    ]
    assert events(result, "admitted")[-1]["borrowed"] == 0


def test_may_borrow_false_may_still_reclaim_its_own_entitlement() -> None:
    data = scenario(
        [itype(G, 2)],
        [share("owner", {G: 2}, "LEND"), share("other", {G: 0}, "LEND_AND_BORROW")],
        [
            job("borrower", "other", [(G, 2)]),
            job("mine", "owner", [(G, 2)], at=10, may_borrow=False),
        ],
    )
    result = simulate(data)
    assert [(e["job"], e["reason"]) for e in events(result, "preempted")] == [
        ("borrower", "reclaim")
    ]


# ---------------------------------------------------------------------------- preemptible


def _in_share(low: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return scenario(
        [itype(G, 2)],
        [share("a", {G: 2}, in_share_preemption=True)],
        [low, job("mid", "a", prio=2), job("urgent", "a", at=10, prio=9), *extra.get("more", [])],
    )


def test_an_in_share_victim_is_the_lowest_priority_preemptible_job() -> None:
    result = simulate(_in_share(job("release", "a", prio=1)))
    assert [e["job"] for e in events(result, "preempted")] == ["release"]
    result = simulate(_in_share(job("release", "a", prio=1, preemptible=False)))
    assert [(e["job"], e["reason"]) for e in events(result, "preempted")] == [("mid", "priority")]


def test_a_job_that_only_not_preemptible_jobs_could_make_room_for_waits() -> None:
    # within its limit (1 + 1 <= 2), but the other instance is held by share b within
    # its own limit: only the release job could make room, and it is not preemptible
    data = scenario(
        [itype(G, 2)],
        [share("a", {G: 2}, in_share_preemption=True), share("b", {G: 1})],
        [
            job("release", "a", prio=1, preemptible=False),
            job("other", "b"),
            job("urgent", "a", at=10, prio=9),
        ],
    )
    result = simulate(data)
    assert events(result, "preempted") == []
    assert _pending(result, "urgent") == ["no_preemptible_victims"]
    data["jobs"][0]["preemptible"] = True
    assert [e["job"] for e in events(simulate(data), "preempted")] == ["release"]


def test_reclaim_still_stops_a_job_that_is_not_preemptible() -> None:
    # its share's limit is lowered: it now runs on borrowed capacity, which the owner
    # takes back
    data = scenario(
        [itype(G, 2)],
        [share("owner", {G: 1}, "LEND"), share("b", {G: 1}, "LEND_AND_BORROW")],
        [job("release", "b", [(G, 2)], preemptible=False), job("mine", "owner", at=20)],
        actions=[{"at": 10, "type": "set_share", "share": "b", "limits": {G: 0}}],
    )
    data["shares"][0]["limits"] = {G: 2}
    result = simulate(data)
    assert [(e["job"], e["reason"]) for e in events(result, "preempted")] == [
        ("release", "reclaim")
    ]


def test_capacity_loss_still_stops_a_job_that_is_not_preemptible() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("a", {G: 1})],
        [job("release", "a", preemptible=False)],
        actions=[{"at": 10, "type": "set_capacity", "instance_type": G, "capacity": 0}],
    )
    result = simulate(data)
    assert [(e["job"], e["reason"]) for e in events(result, "preempted")] == [
        ("release", "capacity_lost")
    ]


def _plan_scenario(first: dict[str, Any], *more: dict[str, Any], end: int = 400) -> dict[str, Any]:
    data = scenario(
        [itype(P, 0, hourly_price=30)],
        [share("a", {P: 0}, in_share_preemption=True)],
        [first, *more],
    )
    data["plans"] = [
        {"name": "tp", "instance_type": P, "count": 1, "share": "a", "start": 0, "end": end}
    ]
    return data


def _on_plan(job_id: str, **extra: Any) -> dict[str, Any]:
    found = job(job_id, "a", **extra)
    found["preferences"] = [{"plan": "tp", "count": 1}]
    return found


def test_on_a_plan_a_job_that_is_not_preemptible_is_no_in_share_victim() -> None:
    result = simulate(_plan_scenario(_on_plan("release", prio=1), _on_plan("urgent", prio=9, at=5)))
    assert next((e["job"], e["reason"]) for e in events(result, "preempted")) == (
        "release",
        "priority",
    )
    data = _plan_scenario(
        _on_plan("release", prio=1, preemptible=False), _on_plan("urgent", prio=9, at=5)
    )
    data["until"] = 300  # before the plan's end
    result = simulate(data, explain=True)
    assert events(result, "preempted") == []
    assert _pending(result, "urgent") == ["plan_full"]


def test_a_plan_end_still_stops_a_job_that_is_not_preemptible() -> None:
    result = simulate(_plan_scenario(_on_plan("release", preemptible=False), end=100))
    assert [(e["job"], e["reason"]) for e in events(result, "preempted")] == [
        ("release", "plan_ended")
    ]


# ---------------------------------------------------------------------------- budget


def _priced(job_fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    # P: speed 2, 36 an hour; G: speed 1, 3.6 an hour
    return scenario(
        [itype(P, 2, speed=2, hourly_price=36), itype(G, 4, hourly_price=3.6)],
        [share("a", {P: 2, G: 4})],
        [job("j", "a", [(P, 1), (G, 1)], **job_fields)],
        **extra,
    )


def test_a_preference_over_budget_is_passed_over_for_the_next() -> None:
    # duration 1000: P needs 500 s x 36/h = 5.00, G needs 1000 s x 3.6/h = 1.00
    result = simulate(_priced({"max_cost": 4.99}))
    assert events(result, "admitted")[0]["preference"] == 1
    result = simulate(_priced({"max_cost": 5}))
    assert events(result, "admitted")[0]["preference"] == 0  # C == max_cost is within


def test_cost_is_exact_and_counts_every_instance() -> None:
    data = _priced({"max_cost": 1.99})
    data["jobs"][0]["preferences"] = [
        {"instance_type": G, "count": 2},
        {"instance_type": P, "count": 1},
    ]
    data["jobs"][0]["max_cost"] = 2
    assert events(simulate(data), "admitted")[0]["preference"] == 0  # 2 x 1.00 = 2
    data["jobs"][0]["max_cost"] = 1.99
    result = simulate(data, explain=True)
    assert _pending(result, "j") == ["over_budget", "over_budget"]


def test_a_job_over_budget_everywhere_waits_and_never_times_out_for_its_deadline() -> None:
    result = simulate(_priced({"max_cost": 0.5, "deadline": 0}, until=None), explain=True)
    assert events(result) == []
    assert result["jobs"]["j"]["state"] == "PENDING"
    assert _pending(result, "j") == ["over_budget", "over_budget"]
    message = result["pending"]["j"][0]["message"]
    assert "5.00" in message and "0.50" in message


def test_budget_is_checked_before_the_deadline() -> None:
    # P is over budget (and would meet the deadline); G meets both
    result = simulate(_priced({"max_cost": 1, "deadline": 1000}), explain=True)
    assert events(result, "admitted")[0]["preference"] == 1
    data = _priced({"max_cost": 1, "deadline": 999, "submit_at": 3})
    result = simulate(data, explain=True)
    assert [(e["type"], e["at"], e.get("reason")) for e in events(result)] == [
        ("timed_out", 3, "deadline")
    ]
    data["until"] = 2
    result = simulate(data)
    assert result["jobs"]["j"]["state"] == "PENDING" and result["pending"] == {}


def test_plan_preferences_are_priced_at_the_plan_price() -> None:
    data = _plan_scenario(_on_plan("j", max_cost=10))
    data["plans"][0]["hourly_price"] = 40  # 1000 s at 40/h = 11.11 > 10
    data["jobs"][0]["preferences"].append({"instance_type": P, "count": 1})
    data["instance_types"][0]["capacity"] = 1
    data["shares"][0]["limits"] = {P: 1}
    result = simulate(data)
    assert events(result, "admitted")[0]["preference"] == 1  # on-demand at 30/h: 8.33
    data["plans"][0]["hourly_price"] = 36  # exactly 10
    assert events(simulate(data), "admitted")[0].get("plan") == "tp"


def test_time_unit_ms_prices_an_hour_as_3600000() -> None:
    data = _priced({"max_cost": 4.99, "duration": 1_000_000})
    data["time_unit"] = "ms"
    data["until"] = 500_000
    assert events(simulate(data), "admitted")[0]["preference"] == 1
    data["jobs"][0]["max_cost"] = 5
    assert events(simulate(data), "admitted")[0]["preference"] == 0


# ---------------------------------------------------------------------------- deadline


def _busy_first_choice(deadline: int, **extra: Any) -> dict[str, Any]:
    """P (speed 2) is busy until 600; G (speed 1) is busy until 300. The job (1000 work)
    needs 500 on P and 1000 on G."""
    return scenario(
        [itype(P, 1, speed=2), itype(G, 1)],
        [share("a", {P: 1, G: 1})],
        [
            job("p-busy", "a", [(P, 1)], duration=1200, prio=9),
            job("g-busy", "a", [(G, 1)], duration=300, prio=9),
            job("j", "a", [(P, 1), (G, 1)], at=1, deadline=deadline, **extra),
        ],
        until=None,
    )


def test_a_first_choice_that_frees_too_late_is_passed_over_for_the_second() -> None:
    # first choice C (speed 0.5: 2000 s for 1000 work) frees at 600; second choice P
    # (speed 2: 500 s) frees at 800. Without a deadline the job starts on C at 600;
    # with deadline 2500, C is eligible only until 500, so it waits for P at 800
    data = scenario(
        [itype(C, 1, speed=0.5), itype(P, 1, speed=2)],
        [share("a", {C: 1, P: 1})],
        [
            job("c-busy", "a", [(C, 1)], duration=300, prio=9),
            job("p-busy", "a", [(P, 1)], duration=1600, prio=9),
            job("j", "a", [(C, 1), (P, 1)], at=1),
        ],
        until=None,
    )
    admitted = events(simulate(data), "admitted")[-1]
    assert (admitted["job"], admitted["at"], admitted["preference"]) == ("j", 600, 0)
    data["jobs"][2]["deadline"] = 2500
    result = simulate(data)
    admitted = events(result, "admitted")[-1]
    assert (admitted["job"], admitted["at"], admitted["preference"]) == ("j", 800, 1)
    data["until"] = 700
    assert _pending(simulate(data), "j") == ["deadline_unreachable", "own_quota_full"]


def test_a_busy_first_choice_gives_way_to_a_free_second_one_then_both_run_out() -> None:
    # deadline 1400: P would end at 600 + 500 = 1100 (fine), G at 300 + 1000 = 1300: at
    # 300 the list order still prefers P, which is busy; G fits, so it starts on G
    result = simulate(_busy_first_choice(1400))
    admitted = events(result, "admitted")[-1]
    assert (admitted["job"], admitted["at"], admitted["preference"]) == ("j", 300, 1)
    # deadline 1050: P is unreachable from 551 on; G from 51 on: it times out at 551,
    # an instant of the run where nothing else happens
    result = simulate(_busy_first_choice(1050), explain=True)
    assert events(result, "timed_out") == [
        {"at": 551, "type": "timed_out", "job": "j", "reason": "deadline"}
    ]
    assert result["jobs"]["j"]["state"] == "TIMED_OUT"


def test_reasons_are_judged_at_until() -> None:
    data = _busy_first_choice(1050)
    data["until"] = 100
    result = simulate(data, explain=True)
    # at 100, P (ends 600) is still eligible but busy; G is past the deadline
    assert _pending(result, "j") == ["own_quota_full", "deadline_unreachable"]
    assert "after the job's deadline" in result["pending"]["j"][1]["message"]
    data["until"] = 550
    assert _pending(simulate(data), "j") == ["own_quota_full", "deadline_unreachable"]
    data["until"] = 551
    assert "j" not in simulate(data)["pending"]


def test_a_deadline_before_submission_times_out_at_submission() -> None:
    data = scenario([itype(G, 0)], [share("a", {G: 1})], [job("j", "a", at=50, deadline=10)])
    result = simulate(data)
    assert events(result) == [{"at": 50, "type": "timed_out", "job": "j", "reason": "deadline"}]


def test_a_deadline_within_reach_lets_the_job_run_and_a_running_job_never_stops_for_it() -> None:
    data = scenario([itype(G, 1)], [share("a", {G: 1})], [job("j", "a", deadline=1000)], until=None)
    result = simulate(data)
    assert [e["type"] for e in events(result)] == ["admitted", "completed"]
    # the end exactly at the deadline is in time; one later is not
    data["jobs"][0]["deadline"] = 999
    assert [e["type"] for e in events(simulate(data))] == ["timed_out"]


def test_an_unknown_run_time_is_always_eligible() -> None:
    data = scenario([itype(G, 0)], [share("a", {G: 1})], [job("j", "a", deadline=5)], until=None)
    del data["jobs"][0]["duration"]
    result = simulate(data)
    assert result["jobs"]["j"]["state"] == "PENDING"
    assert _pending(result, "j") == ["capacity_unavailable"]


def test_timeouts_at_one_instant_go_in_submission_order_whatever_the_reason() -> None:
    data = scenario(
        [itype(G, 0)],
        [share("a", {G: 1})],
        [
            job("late-file-first", "a", at=5, max_pending=95),
            job("deadline", "a", at=0, deadline=1099),  # 100 + 1000 > 1099: from 100
            job("both", "a", at=0, max_pending=100, deadline=1099),
            job("mp", "a", at=0, max_pending=100),
        ],
        until=None,
    )
    result = simulate(data)
    assert [(e["at"], e["job"], e["reason"]) for e in events(result, "timed_out")] == [
        (100, "deadline", "deadline"),
        (100, "both", "max_pending"),
        (100, "mp", "max_pending"),
        (100, "late-file-first", "max_pending"),
    ]


def test_max_pending_alone_keeps_its_reason() -> None:
    data = scenario([itype(G, 0)], [share("a", {G: 1})], [job("j", "a", max_pending=10)])
    assert events(simulate(data)) == [
        {"at": 10, "type": "timed_out", "job": "j", "reason": "max_pending"}
    ]


# ---------------------------------------------------------------------------- run time


def test_without_duration_a_preference_runtime_is_the_run_and_its_expected_time() -> None:
    data = scenario(
        [itype(P, 1, speed=2), itype(G, 1)],
        [share("a", {P: 1, G: 1})],
        [job("j", "a", [(P, 1), (G, 1)], deadline=250)],
        until=None,
    )
    del data["jobs"][0]["duration"]
    data["jobs"][0]["preferences"][0]["runtime"] = 300  # too late: 0 + 300 > 250
    data["jobs"][0]["preferences"][1]["runtime"] = 200  # speed does not scale a runtime
    result = simulate(data)
    assert [(e["type"], e["at"], e.get("preference")) for e in events(result)] == [
        ("admitted", 0, 1),
        ("completed", 200, None),
    ]


def test_restart_overhead_and_checkpoints_move_the_expected_run_time() -> None:
    # 1000 work, checkpoint every 400, overhead 50. Preempted by capacity loss at 500
    # (checkpoint 400): R is then 50 + 600 = 650. The capacity comes back at 600.
    def run_with(deadline: int) -> dict[str, Any]:
        data = scenario(
            [itype(G, 1)],
            [share("a", {G: 1})],
            [
                job(
                    "j",
                    "a",
                    deadline=deadline,
                    checkpoint_interval=400,
                    restart_overhead=50,
                )
            ],
            actions=[
                {"at": 500, "type": "set_capacity", "instance_type": G, "capacity": 0},
                {"at": 600, "type": "set_capacity", "instance_type": G, "capacity": 1},
            ],
            until=None,
        )
        return simulate(data)

    result = run_with(1250)  # 600 + 650 = 1250: in time
    assert [(e["type"], e["at"]) for e in events(result)][-2:] == [
        ("admitted", 600),
        ("completed", 1250),
    ]
    result = run_with(1249)  # unreachable from 600 on: times out at the return
    assert [(e["type"], e["at"]) for e in events(result)][-1:] == [("timed_out", 600)]
    assert events(result, "timed_out")[0]["reason"] == "deadline"


def test_restart_overhead_counts_for_a_runtime_after_any_preemption() -> None:
    data = scenario(
        [itype(G, 1)],
        [share("a", {G: 1})],
        [job("j", "a", restart_overhead=30, max_cost=0.2)],
        actions=[
            {"at": 10, "type": "set_capacity", "instance_type": G, "capacity": 0},
            {"at": 20, "type": "set_capacity", "instance_type": G, "capacity": 1},
        ],
        until=None,
    )
    data["instance_types"][0]["hourly_price"] = 3.6  # 1 per 1000 s
    del data["jobs"][0]["duration"]
    data["jobs"][0]["preferences"][0]["runtime"] = 200  # 0.2 at first, 0.23 after
    result = simulate(data, explain=True)
    assert [(e["type"], e["at"]) for e in events(result)] == [
        ("admitted", 0),
        ("preempted", 10),
    ]
    assert _pending(result, "j") == ["over_budget"]
    data["jobs"][0]["max_cost"] = 0.23
    result = simulate(data)
    assert [(e["type"], e["at"]) for e in events(result)][-2:] == [
        ("admitted", 20),
        ("completed", 250),  # 30 overhead + 200
    ]


def test_the_fields_together_on_a_mixed_list() -> None:
    # a release job that may not borrow and may not be preempted, with a deadline and a
    # budget, over a plan that has not started, a costly fast type and a cheap slow one
    data = scenario(
        [itype(P, 1, speed=2, hourly_price=36), itype(C, 2, hourly_price=0.36)],
        [
            share("a", {P: 1, C: 1}, "LEND_AND_BORROW", in_share_preemption=True),
            share("lender", {C: 1}, "LEND"),
        ],
        [
            job("sweep", "a", [(C, 1)], prio=1),
            job(
                "release",
                "a",
                [(P, 1), (C, 1)],
                at=5,
                prio=8,
                deadline=2000,
                max_cost=1,
                may_borrow=False,
                preemptible=False,
            ),
            job("hotfix", "a", [(C, 1)], at=10, prio=9),
        ],
        until=None,
    )
    result = simulate(data, explain=True)
    # P costs 5.00 (> 1): over budget; on C it would borrow (the sweep holds the limit),
    # which is closed to it, so it preempts the sweep in-share; the sweep then borrows
    # the lender's idle instance; the hotfix may not preempt the release and stops the
    # sweep again to borrow in its place
    assert [
        (e["at"], e["type"], e["job"], e.get("reason"), e.get("borrowed"))
        for e in events(result)
        if e["at"] <= 10
    ] == [
        (0, "admitted", "sweep", None, 0),
        (5, "preempted", "sweep", "priority", None),
        (5, "admitted", "release", None, 0),
        (5, "admitted", "sweep", None, 1),
        (10, "preempted", "sweep", "priority", None),
        (10, "admitted", "hotfix", None, 1),
    ]


# ---------------------------------------------------------------------------- engine API


def test_the_engine_times_out_for_a_deadline_at_an_instant_it_announces() -> None:
    engine = Engine([InstanceType(G, 0)], [ShareConfig("a", {G: 1})])
    engine.submit(Job("j", "a", 1, 0, (Preference(G, 1),), duration=100, deadline=150))
    assert engine.schedule(0) == []
    assert engine.next_deadline() == 51
    assert engine.timeouts(50) == []
    assert [(d.kind, d.rule) for d in engine.timeouts(51)] == [("timed_out", "deadline")]
    assert engine.next_deadline() is None


def test_a_what_if_copy_keeps_the_fields() -> None:
    engine = Engine([InstanceType(G, 0)], [ShareConfig("a", {G: 1})])
    engine.submit(Job("j", "a", 1, 0, (Preference(G, 1),), duration=100, deadline=150, max_cost=0))
    clone = engine.copy()
    assert clone.next_deadline() == 51
    assert [r.reason for r in clone.explain("j", 60)] == ["deadline_unreachable"]
