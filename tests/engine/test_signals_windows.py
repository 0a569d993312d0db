"""Signals of windows that cut through runs, preemptions, restarts and first admissions,
computed inside the whole recording (docs/signals.md, "Rules of counting"), against
values worked out by hand; and a property: the additive figures of consecutive windows
sum to those of the window they split.

The hand recording is in seconds: type G (capacity 2, 3600/h = 1 per second), type P
(capacity 1, 7200/h = 2 per second); share A (team red, limit G:1), share B (team
blue, limits G:1 P:1); until 199, so E = 200.

    t=0   a1 admitted G (A, 100 s)             t=65  b2 completed
          b1 admitted G (B, 50 s)              t=95  b3 completed
    t=5   b2 admitted P, second choice (B)           a2 admitted G again (borrowed 1)
    t=20  a2 submitted (A, G x1, 30 s)         t=100 a1 completed; a6 submitted (A, G x1)
    t=30  a3 submitted (A, P x1, max pending)  t=125 a2 completed; a6 admitted G
    t=50  b1 completed; a3 timed out           t=145 a6 completed
          a2 admitted G (borrowed 1)
    t=55  a2 preempted (reclaim by b3, lost 5)
          b3 admitted G (B, submitted 55)
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.signals import Recording, compute
from scheduler.simulate import run
from tests.engine.test_properties import scenarios

G, P = "G", "P"


def _job(
    name: str, share: str, submit: int, prefs: list[str], duration: int, **extra: Any
) -> dict[str, Any]:
    return {
        "id": name,
        "share": share,
        "submit_at": submit,
        "priority": 1,
        "preferences": [{"instance_type": t, "count": 1} for t in prefs],
        "duration": duration,
        **extra,
    }


SCENARIO: dict[str, Any] = {
    "instance_types": [
        {"name": G, "capacity": 2, "hourly_price": 3600},
        {"name": P, "capacity": 1, "hourly_price": 7200},
    ],
    "shares": [
        {"name": "A", "policy": "LEND_AND_BORROW", "limits": {G: 1}},
        {"name": "B", "policy": "LEND_AND_BORROW", "limits": {G: 1, P: 1}},
    ],
    "jobs": [
        _job("a1", "A", 0, [G], 100),
        _job("b1", "B", 0, [G], 50),
        _job("b2", "B", 5, [G, P], 60),
        _job("a2", "A", 20, [G], 30),
        _job("a3", "A", 30, [P], 10, max_pending=20),
        _job("b3", "B", 55, [G], 40),
        _job("a6", "A", 100, [G], 20),
    ],
    "until": 199,
}


def _admitted(at: int, job: str, kind: str, preference: int = 0, borrowed: int = 0) -> dict:
    return {
        "at": at,
        "type": "admitted",
        "job": job,
        "instance_type": kind,
        "count": 1,
        "preference": preference,
        "borrowed": borrowed,
    }


def _reclaimed(at: int, job: str, *, by: str, lost_work: int) -> dict:
    return {
        "at": at,
        "type": "preempted",
        "job": job,
        "instance_type": G,
        "count": 1,
        "reason": "reclaim",
        "by": by,
        "lost_work": lost_work,
    }


EVENTS: list[dict[str, Any]] = [
    _admitted(0, "a1", G),
    _admitted(0, "b1", G),
    _admitted(5, "b2", P, preference=1),
    {"at": 50, "type": "completed", "job": "b1"},
    {"at": 50, "type": "timed_out", "job": "a3"},
    _admitted(50, "a2", G, borrowed=1),
    _reclaimed(55, "a2", by="b3", lost_work=5),
    _admitted(55, "b3", G),
    {"at": 65, "type": "completed", "job": "b2"},
    {"at": 95, "type": "completed", "job": "b3"},
    _admitted(95, "a2", G, borrowed=1),
    {"at": 100, "type": "completed", "job": "a1"},
    {"at": 125, "type": "completed", "job": "a2"},
    _admitted(125, "a6", G),
    {"at": 145, "type": "completed", "job": "a6"},
]
REC = Recording(scenario=SCENARIO, events=EVENTS, teams={"A": "red", "B": "blue"})


def share(answer: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in answer["groups"] if g.get("share", g.get("team")) == name)


def pcts(*values: float | None) -> dict[str, float | None]:
    return dict(zip(("p50", "p90", "p99"), values, strict=False))


NONE3 = pcts(None, None, None)


def test_a_window_that_starts_while_jobs_run() -> None:
    """[60, 120): a1 (since 0), b2 (since 5) and b3 (since 55) are running at 60; a2 was
    first admitted at 50, preempted at 55 and starts again at 95; a6 waits from 100."""
    answer = compute(REC, 60, 120)
    q = answer["queue"]
    assert q["jobs_finished"] == {
        "SUCCEEDED": 3,
        "FAILED": 0,
        "TIMED_OUT": 0,
        "CANCELLED": 0,
        "total": 3,
    }
    # a2's start at 95 is not a first start: no wait, no fallback in the window
    assert q["wait_to_start"] == {"all": NONE3, "entitled": NONE3, "borrowing": NONE3}
    assert q["fallback"] == {"by_preference": {}, "wait_to_start_p50": {}, "timed_out": 0}
    assert q["fallback_rate"] is None
    # from the real submissions: b3 95-55, b2 65-5, a1 100-0
    assert q["turnaround"]["all"] == pcts(60, 100, 100)
    assert q["turnaround"]["only_own"] == pcts(60, 100, 100)
    assert q["turnaround"]["borrowed"] == NONE3
    # the preemption at 55 is before the window: a restart in it, no preemption
    assert q["time_to_restart"] == {"p50": 40, "p90": 40}
    assert q["preemptions_suffered"]["total"] == 0
    assert q["preemptions_caused"]["total"] == 0
    assert q["lost_work"] == 0
    assert q["goodput"] == 1.0  # W = 60 + 40 + 100
    assert q["preemptions_per_finished_job"] == 0
    assert q["runtime_by_choice"] == {
        "G x1": {"jobs": 2, "run_time": {"p50": 40, "p90": 100}, "cost_p50": 40},
        "P x1": {"jobs": 1, "run_time": {"p50": 60, "p90": 60}, "cost_p50": 120},
    }
    # G: a1 60-100 (40), b3 60-95 (35), a2 95-120 (25); P: b2 60-65 (5)
    assert q["instance_seconds"] == {
        G: {"own": 95, "borrowed": 5, "total": 100},
        P: {"own": 5, "borrowed": 0, "total": 5},
    }
    assert q["cost"] == {
        G: {"own": 95, "borrowed": 5, "total": 100},
        P: {"own": 10, "borrowed": 0, "total": 10},
        "total": {"own": 105, "borrowed": 5, "total": 110},
    }
    assert q["utilization"][G] == {"all": pytest.approx(100 / 120), "borrowed": 5 / 120}
    assert q["utilization"][P] == {"all": pytest.approx(5 / 60), "borrowed": 0}
    # a6 waits on G from 100 while one G is idle (a1 gone, a2 alone) until 120
    assert q["idle_lendable_seconds"] == {G: 20, P: 0}

    a, b = share(answer, "A"), share(answer, "B")
    assert a["jobs_finished"]["total"] == 1 and b["jobs_finished"]["total"] == 2
    assert a["turnaround"]["all"] == pcts(100, 100, 100)
    assert b["turnaround"]["all"] == pcts(40, 60, 60)
    assert a["time_to_restart"] == {"p50": 40, "p90": 40}
    assert b["time_to_restart"] == {"p50": None, "p90": None}
    # A: 60-95 a1 alone (own 35), 95-100 a1 and a2 (own 5, borrowed 5), 100-120 a2 (own 20)
    assert a["instance_seconds"][G] == {"own": 60, "borrowed": 5, "total": 65}
    assert b["instance_seconds"] == {
        G: {"own": 35, "borrowed": 0, "total": 35},
        P: {"own": 5, "borrowed": 0, "total": 5},
    }
    assert a["idle_lendable_seconds"] == {G: 20, P: 0}
    assert b["idle_lendable_seconds"] == {G: 0, P: 0}


def test_a_window_with_first_starts_of_earlier_submissions_and_a_preemption() -> None:
    """[40, 60): a2, submitted at 20, first starts at 50 (borrowing) and is preempted at
    55 by b3's reclaim; a3 times out at 50; b1 completes at 50."""
    answer = compute(REC, 40, 60)
    q = answer["queue"]
    assert q["jobs_finished"]["SUCCEEDED"] == 1 and q["jobs_finished"]["TIMED_OUT"] == 1
    # waits from the real submissions: a2 50-20 (borrowing), b3 55-55 (entitled)
    assert q["wait_to_start"]["all"] == pcts(0, 30, 30)
    assert q["wait_to_start"]["entitled"] == pcts(0, 0, 0)
    assert q["wait_to_start"]["borrowing"] == pcts(30, 30, 30)
    assert q["turnaround"]["all"] == pcts(50, 50, 50)  # b1
    assert q["preemptions_suffered"] == {
        "reclaim": 1,
        "priority": 0,
        "capacity_lost": 0,
        "total": 1,
    }
    assert q["lost_work"] == 5
    assert q["goodput"] == pytest.approx(50 / 55)
    assert q["preemptions_per_finished_job"] == 0  # b1 and a3 were never preempted
    assert q["time_to_restart"] == {"p50": None, "p90": None}
    assert q["fallback"] == {
        "by_preference": {"0": 2},
        "wait_to_start_p50": {"0": 0},
        "timed_out": 1,
    }
    assert q["fallback_rate"] == 0
    # G: a1 40-60 (20), b1 40-50 (10), a2 50-55 (5), b3 55-60 (5); P: b2 40-60
    assert q["instance_seconds"][G] == {"own": 35, "borrowed": 5, "total": 40}
    assert q["instance_seconds"][P] == {"own": 20, "borrowed": 0, "total": 20}
    assert q["idle_lendable_seconds"] == {G: 0, P: 0}
    a, b = share(answer, "A"), share(answer, "B")
    assert a["preemptions_suffered"]["reclaim"] == 1 and a["lost_work"] == 5
    assert b["preemptions_caused"] == {"reclaim": 1, "priority": 0, "total": 1}
    assert b["lost_work"] == 0
    assert a["fallback"]["timed_out"] == 1


def test_a_finished_job_preempted_before_the_window_counts_it() -> None:
    """[120, 200): a2 completes at 125; its preemption at 55 is in its life."""
    q = compute(REC, 120, 200)["queue"]
    assert q["jobs_finished"]["total"] == 2  # a2, a6
    assert q["preemptions_per_finished_job"] == 0.5
    assert q["turnaround"]["all"] == pcts(45, 105, 105)  # a6 145-100, a2 125-20
    assert q["turnaround"]["borrowed"] == pcts(105, 105, 105)  # a2 borrowed
    assert q["wait_to_start"]["all"] == pcts(25, 25, 25)  # a6 125-100
    assert q["instance_seconds"][G]["total"] == 5 + 20  # a2 120-125, a6 125-145


def test_the_example_of_the_docs() -> None:
    """docs/signals.md: job j of alpha, submitted 09:00 (0 s), first start 09:10, preempted
    09:40 by a reclaim (600 lost), started again 10:05, completed 10:45; windows
    10:00-11:00 and 09:00-10:00."""
    scenario = {
        "instance_types": [{"name": G, "capacity": 1}],
        "shares": [
            {"name": "alpha", "policy": "LEND", "limits": {G: 0}},
            {"name": "beta", "limits": {G: 1}},
        ],
        "jobs": [
            _job("j", "alpha", 0, [G], 3600),
            _job("r", "beta", 2400, [G], 1500),
        ],
        "until": 7199,
    }
    events = [
        _admitted(600, "j", G),
        _reclaimed(2400, "j", by="r", lost_work=600),
        _admitted(2400, "r", G),
        {"at": 3900, "type": "completed", "job": "r"},
        _admitted(3900, "j", G),
        {"at": 6300, "type": "completed", "job": "j"},
    ]
    rec = Recording(scenario=scenario, events=events, teams={})
    later = share(compute(rec, 3600, 7200), "alpha")
    assert later["instance_seconds"][G]["total"] == 2400
    assert later["wait_to_start"]["all"]["p50"] is None
    assert later["fallback"]["by_preference"] == {}
    assert later["time_to_restart"] == {"p50": 1500, "p90": 1500}
    assert later["turnaround"]["all"]["p50"] == 6300
    assert later["jobs_finished"]["SUCCEEDED"] == 1
    assert later["preemptions_per_finished_job"] == 1
    assert later["preemptions_suffered"]["total"] == 0 and later["lost_work"] == 0
    assert later["goodput"] == 1.0
    earlier = share(compute(rec, 0, 3600), "alpha")
    assert earlier["instance_seconds"][G]["total"] == 1800
    assert earlier["wait_to_start"]["all"]["p50"] == 600
    assert earlier["preemptions_suffered"]["reclaim"] == 1 and earlier["lost_work"] == 600
    assert earlier["jobs_finished"]["total"] == 0


# ---- additivity over any split into consecutive windows

PRICES = [0, 900, 1800, 3600, 7200]  # per second 0, 1/4, 1/2, 1, 2: sums stay exact


def _additive(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures that add up over consecutive windows."""
    return {
        "jobs_finished": figures["jobs_finished"],
        "preemptions_suffered": figures["preemptions_suffered"],
        "preemptions_caused": figures["preemptions_caused"],
        "lost_work": figures["lost_work"],
        "instance_seconds": figures["instance_seconds"],
        "cost": figures["cost"],
        "idle_lendable_seconds": figures["idle_lendable_seconds"],
        "first_starts": figures["fallback"]["by_preference"],
        "timed_out": figures["fallback"]["timed_out"],
    }


def _add(total: Any, part: Any) -> Any:
    if isinstance(part, dict):
        out = dict(total)
        for key, value in part.items():
            out[key] = _add(out[key], value) if key in out else value
        return out
    return total + part


def _by_group(answer: dict[str, Any]) -> dict[str, Any]:
    out = {"(queue)": _additive(answer["queue"])}
    for group in answer["groups"]:
        out[group.get("share") or group["team"]] = _additive(group)
    return out


settings.register_profile(
    "windows-default",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@settings(settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "windows-default")))
@given(
    data=scenarios(),
    prices=st.lists(st.sampled_from(PRICES), min_size=3, max_size=3),
    cuts=st.lists(st.integers(0, 200), max_size=6),
    group_by=st.sampled_from(["share", "team"]),
)
def test_consecutive_windows_add_up_to_the_whole(
    data: dict[str, Any], prices: list[int], cuts: list[int], group_by: str
) -> None:
    for kind, price in zip(data["instance_types"], prices, strict=False):
        kind["hourly_price"] = price
    data["until"] = 200
    events = run(data)["events"]
    teams = {s["name"]: f"team-{i % 2}" for i, s in enumerate(data["shares"])}
    rec = Recording(scenario=data, events=events, teams=teams)
    bounds = sorted({0, 201, *cuts})
    whole = _by_group(compute(rec, 0, 201, group_by=group_by))
    summed: dict[str, Any] = {}
    for lo, hi in itertools.pairwise(bounds):
        summed = _add(summed, _by_group(compute(rec, lo, hi, group_by=group_by)))
    assert summed == whole


def test_the_command_line_reads_a_history_file(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m scheduler.signals FILE --from S --to S``: the window's figures, as JSON
    or CSV; a window that ends before it starts is refused."""
    from scheduler import signals

    path = tmp_path / "history.json"
    path.write_text(
        json.dumps(
            {
                "scenario": SCENARIO,
                "recorded": {"events": EVENTS, "jobs": {}},
                "teams": {"A": "red", "B": "blue"},
            }
        )
    )
    assert signals.main([str(path), "--from", "60", "--to", "120", "--group-by", "team"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(
        json.dumps(compute(REC, 60, 120, group_by="team"))
    )
    assert signals.main([str(path), "--from", "60", "--to", "120", "--csv"]) == 0
    from governance.api.tables import csv_text  # the product's one CSV writer

    assert capsys.readouterr().out == csv_text(signals.flat_rows(compute(REC, 60, 120)))
    assert signals.main([str(path), "--from", "60", "--to", "60"]) == 2
    assert "--to" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert signals.main([str(tmp_path / "bad.json")]) == 2
