"""Capacity plans (docs/scheduling.md#capacity-plans), one rule per test, through the public runner.

Each test states a tiny scenario; ``simulate`` runs it both incrementally and with full
re-examination and insists the two agree.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.engine import Engine, InstanceType, Job, JobState, Plan, Preference, ShareConfig
from scheduler.simulate import ScenarioError, run, validate
from tests.engine.helpers import C, G, P, events, itype, reasons, share, simulate, trace


def plan(
    name: str = "tp",
    share_name: str = "llm",
    count: int = 2,
    start: int = 0,
    end: int = 1000,
    instance_type: str = P,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "instance_type": instance_type,
        "count": count,
        "share": share_name,
        "start": start,
        "end": end,
        **extra,
    }


def pjob(
    job_id: str,
    prefs: list[tuple[str, int]],
    *,
    share_name: str = "llm",
    at: int = 0,
    prio: int = 1,
    duration: int = 100,
    **extra: Any,
) -> dict[str, Any]:
    """A job whose preferences are ("plan:NAME", n) for a plan, (TYPE, n) otherwise."""
    preferences = [
        {"plan": t[5:], "count": n} if t.startswith("plan:") else {"instance_type": t, "count": n}
        for t, n in prefs
    ]
    return {
        "id": job_id,
        "share": share_name,
        "submit_at": at,
        "priority": prio,
        "preferences": preferences,
        "duration": duration,
        **extra,
    }


def data(
    jobs: list[dict[str, Any]],
    *,
    plans: list[dict[str, Any]] | None = None,
    types: list[dict[str, Any]] | None = None,
    shares: list[dict[str, Any]] | None = None,
    actions: list[dict[str, Any]] | None = None,
    until: int | None = None,
) -> dict[str, Any]:
    scenario: dict[str, Any] = {
        "instance_types": types or [itype(P, 2)],
        "shares": shares or [share("llm", {P: 2})],
        "plans": plans if plans is not None else [plan()],
        "jobs": jobs,
    }
    if actions:
        scenario["actions"] = actions
    if until is not None:
        scenario["until"] = until
    return scenario


def plan_of(result: dict[str, Any], job_id: str, kind: str = "admitted") -> list[str | None]:
    return [e.get("plan") for e in events(result, kind) if e["job"] == job_id]


# ---------------------------------------------------------------------------- activation


def test_a_plan_is_used_only_from_its_start_and_its_start_is_an_instant_of_the_run() -> None:
    result = simulate(
        data([pjob("a", [("plan:tp", 2)])], plans=[plan(start=50, end=500)]), explain=True
    )
    # nothing else happens at 50: the default ``until`` still reaches the plan's start
    assert events(result, "admitted") == [
        {
            "at": 50,
            "type": "admitted",
            "job": "a",
            "plan": "tp",
            "instance_type": P,
            "count": 2,
            "preference": 0,
            "borrowed": 0,
        }
    ]
    assert result["jobs"]["a"]["wait"] == 50


def test_before_its_start_a_job_falls_back_and_waits_with_plan_not_active() -> None:
    scenario = data(
        [pjob("a", [("plan:tp", 1), (P, 1)]), pjob("b", [("plan:tp", 1)])],
        plans=[plan(start=50)],
        until=10,
    )
    result = simulate(scenario, explain=True)
    assert [(e["job"], e["preference"], "plan" in e) for e in events(result, "admitted")] == [
        ("a", 1, False)
    ]
    assert reasons(result) == {"b": ["plan_not_active"]}


def test_a_plan_starting_now_is_active_in_this_instants_cycles() -> None:
    result = simulate(data([pjob("a", [("plan:tp", 1), (P, 1)], at=50)], plans=[plan(start=50)]))
    assert plan_of(result, "a") == ["tp"]


# ---------------------------------------------------------------------------- fallback


def test_a_full_plan_falls_through_to_the_next_preference_and_records_it() -> None:
    result = simulate(
        data(
            [pjob("a", [("plan:tp", 2), (P, 2)]), pjob("b", [("plan:tp", 2), (P, 2)])],
            plans=[plan(count=2)],
        )
    )
    rows = [(e["job"], e["preference"], e.get("plan")) for e in events(result, "admitted")]
    assert rows == [("a", 0, "tp"), ("b", 1, None)]
    assert result["jobs"]["b"]["preference"] == 1


def test_a_plan_preference_without_a_count_takes_the_common_count() -> None:
    job = pjob("a", [], count=2)
    job["preferences"] = [{"plan": "tp"}, {"instance_type": P}]
    result = simulate(data([job], plans=[plan(count=2)]))
    assert [(e["count"], e.get("plan")) for e in events(result, "admitted")] == [(2, "tp")]


# ---------------------------------------------------------------------------- plan end


def test_the_plan_end_preempts_with_plan_ended_not_counted_against_retries() -> None:
    result = simulate(
        data(
            [pjob("a", [("plan:tp", 2), (P, 2)], duration=300, checkpoint_interval=40)],
            plans=[plan(end=100)],
            shares=[share("llm", {P: 2}, preemption_retries=0)],
        )
    )
    assert trace(result) == [
        (0, "admitted", "a"),
        (100, "preempted", "a"),
        (100, "admitted", "a"),  # considered in the same instant's cycles
        (320, "completed", "a"),
    ]
    stop = events(result, "preempted")[0]
    assert (stop["reason"], stop["by"], stop["plan"], stop["lost_work"]) == (
        "plan_ended",
        None,
        "tp",
        20,
    )
    assert events(result, "admitted")[1]["preference"] == 1
    assert "plan" not in events(result, "admitted")[1]
    assert result["jobs"]["a"]["state"] == "SUCCEEDED"
    assert result["jobs"]["a"]["preemptions"] == 1


def test_after_its_end_a_plan_is_not_active_and_its_end_is_an_instant_of_the_run() -> None:
    result = simulate(
        data(
            [pjob("a", [("plan:tp", 2)], duration=300), pjob("b", [("plan:tp", 1)], at=100)],
            plans=[plan(end=100)],
        ),
        explain=True,
    )
    assert [(e["at"], e["job"], e["reason"]) for e in events(result, "preempted")] == [
        (100, "a", "plan_ended")
    ]
    assert reasons(result) == {"a": ["plan_not_active"], "b": ["plan_not_active"]}


# ---------------------------------------------------------------------------- preemption


def test_in_plan_preemption_stops_lower_priority_jobs_on_the_plan_minimal_set() -> None:
    jobs = [
        pjob("low1", [("plan:tp", 1)], prio=1, duration=500),
        pjob("low2", [("plan:tp", 1)], prio=2, duration=500),
        pjob("mid", [("plan:tp", 1)], prio=3, duration=500),
        pjob("high", [("plan:tp", 2)], prio=5, at=10, duration=50),
    ]
    result = simulate(
        data(
            jobs,
            plans=[plan(count=3)],
            shares=[share("llm", {P: 2}, in_share_preemption=True)],
        )
    )
    stops = [(e["job"], e["reason"], e["by"], e["plan"]) for e in events(result, "preempted")]
    # victim order (lower priority first) until 2 are free, then the minimal set
    assert stops[:2] == [("low1", "priority", "high", "tp"), ("low2", "priority", "high", "tp")]
    assert plan_of(result, "high") == ["tp"]


def test_without_in_share_preemption_a_plan_preference_waits_with_plan_full() -> None:
    jobs = [
        pjob("low", [("plan:tp", 2)], prio=1, duration=500),
        pjob("high", [("plan:tp", 1)], prio=9, at=10),
    ]
    result = simulate(data(jobs, plans=[plan(count=2)], until=20), explain=True)
    assert events(result, "preempted") == []
    assert reasons(result) == {"high": ["plan_full"]}


def test_only_a_job_asking_at_most_the_plans_count_may_preempt_on_it() -> None:
    jobs = [
        pjob("low", [("plan:tp", 1)], prio=1, duration=500),
        pjob("big", [("plan:tp", 3), (P, 1)], prio=9, at=10),
    ]
    result = simulate(
        data(
            jobs,
            plans=[plan(count=2)],
            shares=[share("llm", {P: 2}, in_share_preemption=True)],
            until=20,
        ),
        explain=True,
    )
    assert events(result, "preempted") == []
    assert plan_of(result, "big") == [None]  # fell back to on-demand


def test_an_on_demand_placement_never_preempts_a_job_on_a_plan() -> None:
    # "hi" needs 2 on-demand; the share's only other job runs on the plan, so preemption
    # cannot help on-demand: the plan's job is not in usage(S,T) nor a victim there
    jobs = [
        pjob("onplan", [("plan:tp", 2)], prio=1, duration=500),
        pjob("od", [(P, 1)], prio=1, duration=500),
        pjob("hi", [(P, 2)], prio=9, at=10),
    ]
    result = simulate(
        data(
            jobs,
            plans=[plan(count=2)],
            types=[itype(P, 2)],
            shares=[share("llm", {P: 2}, in_share_preemption=True)],
            until=20,
        )
    )
    assert [e["job"] for e in events(result, "preempted")] == ["od"]


# ---------------------------------------------------------------------------- separation


def test_plan_usage_is_not_the_shares_usage_nor_the_types_total() -> None:
    # llm holds 2 on the plan and still uses its whole limit of 2 on demand; "other"
    # still gets its own 2: the plan's instances come in addition to capacity 4
    jobs = [
        pjob("p", [("plan:tp", 2)], duration=500),
        pjob("o1", [(P, 2)], duration=500),
        pjob("x", [(P, 2)], share_name="other", duration=500),
    ]
    result = simulate(
        data(
            jobs,
            plans=[plan(count=2)],
            types=[itype(P, 4)],
            shares=[share("llm", {P: 2}), share("other", {P: 2})],
            until=10,
        )
    )
    assert sorted((e["job"], e["borrowed"], e.get("plan")) for e in events(result, "admitted")) == [
        ("o1", 0, None),
        ("p", 0, "tp"),
        ("x", 0, None),
    ]


def test_a_plan_is_never_lent_and_needs_no_limit_on_its_type() -> None:
    jobs = [
        pjob("b", [(P, 1)], share_name="borrower", duration=500),
        pjob("p", [("plan:tp", 1)], duration=50, at=5),
    ]
    result = simulate(
        data(
            jobs,
            plans=[plan(count=4)],
            types=[itype(P, 0), itype(G, 1)],
            shares=[
                share("llm", {G: 1}),
                share("borrower", {P: 0}, policy="LEND_AND_BORROW", borrow_limit=-1),
            ],
            until=20,
        ),
        explain=True,
    )
    assert plan_of(result, "p") == ["tp"]
    assert reasons(result) == {"b": ["capacity_unavailable"]}


def test_set_capacity_never_stops_a_job_on_a_plan_nor_is_it_reclaimed() -> None:
    jobs = [pjob("p", [("plan:tp", 2)], duration=500)]
    actions = [{"at": 10, "type": "set_capacity", "instance_type": P, "capacity": 0}]
    result = simulate(data(jobs, plans=[plan(count=2)], actions=actions, until=50))
    assert events(result, "preempted") == []
    assert result["jobs"]["p"]["state"] == "RUNNING"


# ---------------------------------------------------------------------------- count changes


def test_a_count_drop_preempts_within_the_plan_as_capacity_lost() -> None:
    jobs = [
        pjob("a", [("plan:tp", 1), (P, 1)], prio=3, duration=500),
        pjob("b", [("plan:tp", 1), (P, 1)], prio=1, duration=500),
        pjob("c", [("plan:tp", 1), (P, 1)], prio=2, duration=500),
        pjob("d", [(P, 1)], prio=1, duration=500),
    ]
    actions = [{"at": 10, "type": "set_plan", "plan": "tp", "count": 1}]
    result = simulate(
        data(
            jobs,
            plans=[plan(count=3)],
            shares=[share("llm", {P: 2}, preemption_retries=0)],
            actions=actions,
            until=20,
        )
    )
    stops = [(e["at"], e["job"], e["reason"], e["plan"]) for e in events(result, "preempted")]
    # victim order: lower priority first; the on-demand job "d" is not touched
    assert stops == [(10, "b", "capacity_lost", "tp"), (10, "c", "capacity_lost", "tp")]
    assert events(result, "failed") == []
    # c (priority 2) takes the one on-demand instance left; b waits
    assert plan_of(result, "c") == ["tp", None]
    assert result["jobs"]["b"]["state"] == "PENDING"


def test_a_count_rise_is_like_capacity_arriving() -> None:
    jobs = [pjob("a", [("plan:tp", 2)], duration=500), pjob("b", [("plan:tp", 1)])]
    actions = [{"at": 30, "type": "set_plan", "plan": "tp", "count": 3}]
    result = simulate(data(jobs, plans=[plan(count=2)], actions=actions, until=40))
    assert [(e["at"], e["job"]) for e in events(result, "admitted")] == [(0, "a"), (30, "b")]


# ---------------------------------------------------------------------------- reasons


def test_plan_reasons_come_before_section_4_codes_and_in_their_order() -> None:
    jobs = [
        pjob("running", [("plan:now", 2)], duration=500, prio=2),
        pjob("later", [("plan:soon", 1), (G, 1)]),
        pjob("small", [("plan:now", 3)]),
        pjob("full", [("plan:now", 1)]),
    ]
    result = simulate(
        data(
            jobs,
            plans=[plan("now", count=2), plan("soon", start=100, end=200)],
            types=[itype(P, 0), itype(G, 0)],
            shares=[share("llm", {P: 2})],
            until=10,
        ),
        explain=True,
    )
    assert reasons(result) == {
        "later": ["plan_not_active", "no_limit_for_type"],
        "small": ["plan_too_small"],
        "full": ["plan_full"],
    }
    message = result["pending"]["small"][0]["message"]
    assert "2 instances" in message and "3" in message


# ---------------------------------------------------------------------------- max pending


@pytest.mark.parametrize(("type_name", "times_out"), [(P, True), (C, False)])
def test_max_pending_applies_to_a_plan_preference_when_its_type_is_accelerated(
    type_name: str, times_out: bool
) -> None:
    jobs = [pjob("a", [("plan:tp", 1)], max_pending=30)]
    result = simulate(
        data(
            jobs,
            plans=[plan(start=100, instance_type=type_name)],
            types=[itype(type_name, 0)],
            shares=[share("llm", {type_name: 1})],
        )
    )
    kinds = [e["type"] for e in result["events"]]
    assert kinds == (["timed_out"] if times_out else ["admitted", "completed"])


# ---------------------------------------------------------------------------- order


def test_order_within_an_instant_completions_plan_ends_actions_submissions_cycles() -> None:
    # at 100: "done" completes, plans "x" then "y" end (file order of plans, and of jobs
    # within a plan: "p2" is listed before "p1" though submitted later), then the
    # capacity drop stops "od" (the lowest priority of the on-demand jobs); the cycles
    # then find no room: the jobs off the plans wait within their share's limit.
    jobs = [
        pjob("done", [(P, 1)], duration=100, prio=5),
        pjob("od", [(P, 1)], duration=500, prio=0),
        pjob("od2", [(P, 1)], duration=500, prio=5),
        pjob("od3", [(P, 1)], duration=500, prio=5),
        pjob("p2", [("plan:x", 1), (P, 1)], at=5, duration=500),
        pjob("p1", [("plan:x", 1), (P, 1)], duration=500),
        pjob("q", [("plan:y", 1), (P, 1)], duration=500),
        pjob("new", [("plan:x", 1), (P, 1)], at=100, duration=500, prio=9),
    ]
    # on demand: 4 of 4 used until 100; "done" frees 1, the drop to 2 stops one job
    actions = [{"at": 100, "type": "set_capacity", "instance_type": P, "capacity": 2}]
    result = simulate(
        data(
            jobs,
            plans=[plan("x", count=2, end=100), plan("y", count=1, end=100)],
            types=[itype(P, 4)],
            shares=[share("llm", {P: 4})],
            actions=actions,
            until=100,
        )
    )
    at_100 = [(e["type"], e["job"], e.get("reason")) for e in result["events"] if e["at"] == 100]
    assert at_100[:5] == [
        ("completed", "done", None),
        ("preempted", "p2", "plan_ended"),
        ("preempted", "p1", "plan_ended"),
        ("preempted", "q", "plan_ended"),
        ("preempted", "od", "capacity_lost"),
    ]
    assert [e["job"] for e in events(result, "admitted") if e["at"] == 100] == []
    assert reasons(result)["new"] == ["plan_not_active", "no_preemptible_victims"]


def test_a_timeout_at_the_plans_start_comes_after_the_cycles() -> None:
    jobs = [pjob("a", [("plan:tp", 1)], max_pending=50)]
    result = simulate(data(jobs, plans=[plan(start=50)]))
    assert [e["type"] for e in result["events"]] == ["admitted", "completed"]


# ---------------------------------------------------------------------------- validation


def _problems(scenario: dict[str, Any]) -> list[str]:
    return [p.split(":")[0] for p in validate(scenario)]


def test_validation_names_the_plan_preference_field() -> None:
    jobs = [
        pjob("proc", [("plan:tp", 1)], kind="processing"),
        pjob("other", [("plan:tp", 1)], share_name="other"),
        pjob("unknown", [("plan:nope", 1)]),
        pjob("both", [("plan:tp", 1)]),
        pjob("kind", [(P, 1)], kind="batch"),
    ]
    jobs[3]["preferences"][0]["instance_type"] = P
    scenario = data(jobs, shares=[share("llm", {P: 2}), share("other", {P: 1})])
    assert _problems(scenario) == [
        "jobs[0].preferences[0].plan",
        "jobs[1].preferences[0].plan",
        "jobs[2].preferences[0].plan",
        "jobs[3].preferences[0].instance_type",
        "jobs[4].kind",
    ]
    with pytest.raises(ScenarioError):
        run(scenario)


def test_validation_of_plan_fields_and_set_plan() -> None:
    plans = [
        {"instance_type": P, "count": 1, "share": "llm", "start": 0, "end": 10},
        plan("dup"),
        plan("dup"),
        plan("neg", count=-1, start=-1),
        plan("back", start=10, end=10),
        plan("odd", share_name="nobody", instance_type="ml.nope", extra=1),
        {"name": "bare"},
    ]
    actions = [
        {"at": 1, "type": "set_plan", "plan": "nope", "count": 1},
        {"at": 1, "type": "set_plan", "plan": "dup", "count": -1},
        {"at": 1, "type": "set_plan"},
    ]
    assert _problems(data([], plans=plans, actions=actions)) == [
        "plans[0].name",
        "plans[2].name",
        "plans[3].count",
        "plans[3].start",
        "plans[4].end",
        "plans[5].extra",
        "plans[5].instance_type",
        "plans[5].share",
        "plans[6].instance_type",
        "plans[6].share",
        "plans[6].count",
        "plans[6].start",
        "plans[6].end",
        "actions[0].plan",
        "actions[1].count",
        "actions[2].plan",
        "actions[2].count",
    ]


def test_hourly_price_defaults_to_zero_and_a_valid_plan_scenario_passes() -> None:
    assert validate(data([pjob("a", [("plan:tp", 1)])])) == []


# ---------------------------------------------------------------------------- engine API


def _engine() -> Engine:
    return Engine(
        [InstanceType(P, 2)],
        [ShareConfig("llm", {P: 2}), ShareConfig("other", {P: 0})],
        plans=[Plan("tp", P, 2, "llm", 10, 100)],
    )


def test_engine_next_deadline_includes_plan_start_then_end() -> None:
    engine = _engine()
    assert engine.next_deadline() == 10
    engine.submit(Job("a", "llm", 1, 0, (Preference(P, 1, "tp"),)))
    assert engine.schedule(0) == []
    assert engine.explain("a")[0].reason == "plan_not_active"
    admitted = engine.schedule(10)
    assert [(d.kind, d.plan) for d in admitted] == [("admitted", "tp")]
    assert engine.next_deadline() == 100
    usage = engine.plan_usage("tp")
    assert (usage.count, usage.usage, usage.active, usage.jobs) == (2, 1, True, ("a",))
    assert engine.accounting(P)[0].usage == 0  # plan usage is not on-demand usage
    preview = engine.copy()
    ended = preview.advance_plans(100)
    assert [(d.kind, d.rule, d.plan) for d in ended] == [("preempted", "plan_ended", "tp")]
    assert engine.plan_usage("tp").usage == 1  # the copy is independent
    assert preview.next_deadline() is None


@pytest.mark.parametrize(
    "job",
    [
        Job("p", "llm", 1, 0, (Preference(P, 1, "tp"),), kind="processing"),
        Job("o", "other", 1, 0, (Preference(P, 1, "tp"),)),
        Job("t", "llm", 1, 0, (Preference(G, 1, "tp"),)),
    ],
    ids=["processing", "other-share", "wrong-type"],
)
def test_engine_refuses_a_job_that_may_not_name_the_plan(job: Job) -> None:
    engine = _engine()
    with pytest.raises(ValueError):
        engine.submit(job)
    assert list(engine.jobs()) == []


def test_a_plan_the_engine_was_not_given_never_fits_and_is_not_active() -> None:
    # a live caller may load only current plans: a job naming another is no error
    engine = _engine()
    engine.submit(Job("u", "llm", 1, 0, (Preference(P, 1, "gone"), Preference(P, 1))))
    engine.submit(Job("v", "llm", 1, 0, (Preference(P, 1, "gone"),)))
    decisions = engine.schedule(20)
    assert [(d.job, d.preference, d.plan) for d in decisions] == [("u", 1, None)]
    assert [r.reason for r in engine.explain("v")] == ["plan_not_active"]


def test_a_restored_run_on_a_plan_is_ended_by_the_first_schedule_after_the_end() -> None:
    # the live bridge rebuilds the engine each cycle and calls schedule(now) only
    engine = _engine()
    running = Job("r", "llm", 1, 0, (Preference(P, 2, "tp"), Preference(P, 2)))
    running.state = JobState.RUNNING
    running.instance_type, running.plan, running.count, running.preference = P, "tp", 2, 0
    running.run_started_at = 10
    engine.restore([running])
    assert engine.plan_usage("tp").usage == 2
    assert engine.accounting(P)[0].usage == 0
    decisions = engine.schedule(130)
    assert [(d.kind, d.rule, d.plan, d.preference) for d in decisions] == [
        ("preempted", "plan_ended", "tp", None),
        ("admitted", "own", None, 1),
    ]
    assert engine.advance_plans(130) == []  # done once per instant
    assert engine.job("r").counted_preemptions == 0


def test_a_job_moves_from_an_ending_plan_to_one_starting_at_the_same_instant() -> None:
    jobs = [pjob("a", [("plan:old", 2), ("plan:new", 2)], duration=150, checkpoint_interval=50)]
    result = simulate(data(jobs, plans=[plan("old", end=100), plan("new", start=100, end=300)]))
    assert [(e["at"], e["type"], e.get("plan"), e.get("preference")) for e in result["events"]] == [
        (0, "admitted", "old", 0),
        (100, "preempted", "old", None),
        (100, "admitted", "new", 1),
        (150, "completed", None, None),
    ]


def test_running_jobs_are_the_running_ones_on_types_and_on_plans() -> None:
    engine = _engine()
    engine.submit(Job("plan", "llm", 1, 0, (Preference(P, 1, "tp"),)))
    engine.submit(Job("demand", "llm", 1, 0, (Preference(P, 2),)))
    engine.submit(Job("waits", "llm", 1, 0, (Preference(P, 2),)))
    engine.schedule(10)
    assert sorted(j.id for j in engine.running_jobs()) == ["demand", "plan"]
    assert sorted(j.id for j in engine.running_jobs()) == sorted(
        j.id for j in engine.jobs() if j.state is JobState.RUNNING
    )
    engine.complete("demand", 20)
    assert [j.id for j in engine.running_jobs()] == ["plan"]
