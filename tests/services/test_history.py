"""The history export (docs/signals.md): a queue run by the simulated fleet from its first
submission, exported, and replayed by the scenario runner, reproduces what happened.

The fleet runs at the clock's pace (``DEMO_TIME_FACTOR=1``) and the test plays the
scheduler's part with a cycle at every moment something happens (a submission, a change,
a run's end), as the live triggers do; the services' clock is the test's, so the audit
entries of share and capacity edits fall where the test puts them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from governance.models import JobQueue
from governance.services import capacity as capacity_svc
from governance.services import jobs as jobs_svc
from governance.services import shares as shares_svc
from scheduler import history, signals, simulate
from scheduler.cycle.run import run_cycle
from tests.factories import (
    InstanceTypeFactory,
    TeamFactory,
    make_admin,
    make_job,
    make_lead,
    make_queue,
    make_share,
)

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"
T0 = datetime(2025, 3, 3, 8, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Clock:
    settings.DEMO_TIME_FACTOR = 1
    c = Clock()
    monkeypatch.setattr(timezone, "now", c)
    return c


def drive(queue: JobQueue, clock: Clock, steps: dict[float, Any], until: float) -> None:
    """Run cycles at every submission, step and run end until ``until`` (seconds)."""
    moments = set(steps)
    t = 0.0
    while t <= until:
        clock.now = at(t)
        if t in steps:
            steps[t]()
        result = run_cycle(queue.pk, now=at(t))
        later = [m for m in moments if m > t]
        if result.next_event_in is not None:
            later.append(t + result.next_event_in)
        if not later:
            break
        t = min(later)


@pytest.fixture
def world(clock: Clock) -> Any:
    from types import SimpleNamespace

    InstanceTypeFactory(name=P4, speed=2.0, hourly_price=32.77)
    queue = make_queue("hist", {G5: 2, P4: 1})
    red, blue = TeamFactory(name="red"), TeamFactory(name="blue")
    alpha = make_share(queue, red, "alpha", {G5: 1, P4: 1}, policy="LEND")
    beta = make_share(
        queue,
        blue,
        "beta",
        {G5: 1},
        policy="LEND_AND_BORROW",
        borrow_limit=-1,
        in_share_preemption=True,
        preemption_retries=1,
    )
    return SimpleNamespace(
        queue=queue,
        alpha=alpha,
        beta=beta,
        red_lead=make_lead(red, "red_lead"),
        blue_lead=make_lead(blue, "blue_lead"),
        admin=make_admin(),
    )


def run_history(world: Any, clock: Clock) -> dict[str, Any]:
    jobs: dict[str, Any] = {}

    def submit(name: str, share: Any, lead: Any, t: float, prefs: list[Any], **kw: Any) -> None:
        def step() -> None:
            jobs[name] = make_job(
                share,
                lead,
                name=name,
                submitted_at=at(t),
                preferences=[{"instance_type": i, "count": n} for i, n in prefs],
                **kw,
            )

        steps.setdefault(t, []).append(step)

    steps: dict[float, list[Any]] = {}
    submit("b1", world.beta, world.blue_lead, 0, [(G5, 2)], duration=100, priority=1)
    submit("a1", world.alpha, world.red_lead, 10, [(G5, 1)], duration=50, priority=5)
    submit("b2", world.beta, world.blue_lead, 15, [(P4, 1), (G5, 1)], duration=30, priority=1)
    submit("a2", world.alpha, world.red_lead, 20, [(P4, 1)], duration=40, priority=5)
    submit("b3", world.beta, world.blue_lead, 22, [(G5, 1)], duration=25, priority=9)
    submit("b4", world.beta, world.blue_lead, 24, [(G5, 3)], duration=10, priority=1)
    submit("a3", world.alpha, world.red_lead, 70, [(G5, 2)], duration=20, priority=5)
    steps.setdefault(30, []).append(
        lambda: jobs_svc.job_cancel(actor=world.admin, job=jobs["b4"], reason="not needed")
    )
    steps.setdefault(40, []).append(
        lambda: capacity_svc.queue_set_capacity(
            actor=world.admin, queue=world.queue, capacity={G5: 3, P4: 1}
        )
    )

    def edit() -> None:
        world.alpha.refresh_from_db()
        shares_svc.share_update(
            actor=world.admin,
            share=world.alpha,
            changes={"limits": {G5: 2, P4: 1}},
            version=world.alpha.version,
        )

    steps.setdefault(45, []).append(edit)
    drive(
        world.queue,
        clock,
        {t: (lambda fs=fs: [f() for f in fs]) for t, fs in steps.items()},
        until=400,
    )
    return jobs


def test_replaying_the_export_reproduces_the_recorded_events(world: Any, clock: Clock) -> None:
    run_history(world, clock)
    out = history.export(world.queue, at(-1), at(400))
    scenario, recorded = out["scenario"], out["recorded"]["events"]
    assert out["teams"] == {"alpha": "red", "beta": "blue"}
    assert scenario["time_unit"] == "ms" and scenario["until"] == 400_999
    assert {t["name"]: t["capacity"] for t in scenario["instance_types"]} == {G5: 2, P4: 1}
    kinds = [a["type"] for a in scenario["actions"]]
    assert kinds == ["cancel", "set_capacity", "set_share"]
    assert scenario["shares"][0]["limits"] == {G5: 1, P4: 1}  # alpha as it was at the start
    types = {e["type"] for e in recorded}
    assert {"admitted", "preempted", "completed", "cancelled"} <= types
    assert any(e.get("reason") == "reclaim" for e in recorded)
    assert any(e.get("preference") == 1 for e in recorded if e["type"] == "admitted")

    replay = simulate.run(scenario)
    assert replay["events"] == recorded
    assert replay["jobs"] == out["recorded"]["jobs"]


def test_a_later_window_lists_running_jobs_at_zero_and_only_its_events(
    world: Any, clock: Clock
) -> None:
    run_history(world, clock)
    out = history.export(world.queue, at(45), at(60))
    scenario = out["scenario"]
    assert all(e["at"] >= 0 and e["at"] < 15_000 for e in out["recorded"]["events"])
    running_before = [j for j in scenario["jobs"] if j["submit_at"] == 0]
    assert running_before  # the jobs pending or running at 45 s
    # the share edit at 45 s is the shares' state at the start: alpha as edited before it
    assert scenario["shares"][0]["limits"] == {G5: 1, P4: 1}
    assert [a["type"] for a in scenario["actions"]] == ["set_share"]
    assert not simulate.validate(scenario)


def test_signals_of_the_export_count_what_happened(world: Any, clock: Clock) -> None:
    jobs = run_history(world, clock)
    out = history.export(world.queue, at(-1), at(400))
    rec = signals.Recording(out["scenario"], out["recorded"]["events"], out["teams"])
    answer = signals.compute(rec, 0, 401_000)
    finished = answer["queue"]["jobs_finished"]
    done = [j for j in jobs.values() if (j.refresh_from_db() or j.state) != "PENDING"]
    assert finished["total"] == len([j for j in done if j.finished_at is not None])
    assert finished["CANCELLED"] == 1


def test_export_history_command_writes_a_replayable_file(
    world: Any, clock: Clock, tmp_path: Any
) -> None:
    run_history(world, clock)
    target = tmp_path / "h.json"
    call_command(
        "export_history",
        str(world.queue.pk),
        "--from",
        at(-1).isoformat(),
        "--to",
        at(400).isoformat(),
        "--output",
        str(target),
    )
    data = json.loads(target.read_text())
    replay = simulate.run(data["scenario"])
    assert {"events": replay["events"], "jobs": replay["jobs"]} == data["recorded"]


def test_whatif_command_on_a_queue_and_on_a_file(
    world: Any, clock: Clock, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_history(world, clock)
    clock.now = at(400)
    window = ["--from", at(-1).isoformat(), "--to", at(400).isoformat()]
    call_command("whatif", "hist", *window, "--set", "beta.borrow_limit=0")
    out = capsys.readouterr().out
    assert "proposed - as it was" in out and "beta" in out and "alpha" in out
    target = tmp_path / "h.json"
    call_command("export_history", "hist", *window, "--output", str(target))
    capsys.readouterr()
    call_command("whatif", "--file", str(target), "--capacity", f"{G5}=5", "--json")
    result = json.loads(capsys.readouterr().out)
    assert result["proposal"] == {"shares": {}, "capacity": {G5: 5}}
    assert result["events"]["baseline"] > 0
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=r"shares\.nobody"):
        call_command("whatif", "--file", str(target), "--set", "nobody.policy=LEND")
    with pytest.raises(CommandError, match=r"shares\.beta\.policy"):
        call_command("whatif", "hist", *window, "--set", "beta.policy=NOPE")


def run_plan_history(world: Any, clock: Clock) -> None:
    """Alpha's plan on P4 (1 instance, [20 s, 60 s), resized to 2 at 40 s); a job naming
    it first before it starts (falls back to G5), one on it past its end (stopped by
    plan_ended, back on G5), and one on it while it is larger."""
    from governance.services import plans as plans_svc

    clock.now = at(0)
    plan = plans_svc.plan_create(
        actor=world.admin,
        queue=world.queue,
        share=world.alpha,
        name="alpha-reserved",
        instance_type=P4,
        count=1,
        start=at(20),
        end=at(60),
        hourly_price="10",
        reason="bought for the spring runs",
    )
    jobs: dict[str, Any] = {}

    def submit(name: str, t: float, prefs: list[dict[str, Any]], duration: int) -> Any:
        def step() -> None:
            jobs[name] = make_job(
                world.alpha,
                world.red_lead,
                name=name,
                kind="training",
                submitted_at=at(t),
                preferences=prefs,
                duration=duration,
                priority=5,
            )

        return step

    on_plan_first = [{"plan": plan.name, "count": 1}, {"instance_type": G5, "count": 1}]

    def resize() -> None:
        plan.refresh_from_db()
        plans_svc.plan_resize(actor=world.admin, plan=plan, count=2, reason="one more")

    steps = {
        10.0: submit("early", 10, on_plan_first, 5),  # before the plan: on G5
        25.0: submit("on-plan", 25, on_plan_first, 100),  # on the plan (speed 2) past its end
        40.0: resize,
        45.0: submit("second", 45, [{"plan": plan.name, "count": 1}], 5),
    }
    drive(world.queue, clock, steps, until=300)


def test_a_queue_with_a_capacity_plan_exports_and_replays_exactly(world: Any, clock: Clock) -> None:
    """docs/signals.md: the plan, its resize and the runs on it are in the export; the
    replay reproduces the recorded events (plan admissions and the plan_ended stop
    included), and the signals read the plan's figures from it."""
    run_plan_history(world, clock)
    out = history.export(world.queue, at(-1), at(300))
    scenario, recorded = out["scenario"], out["recorded"]["events"]
    assert scenario["plans"] == [
        {
            "name": "alpha-reserved",
            "instance_type": P4,
            "count": 1,
            "share": "alpha",
            "start": 21_000,
            "end": 61_000,
            "hourly_price": 10.0,
        }
    ]
    assert [a for a in scenario["actions"] if a["type"] == "set_plan"] == [
        {"at": 41_000, "type": "set_plan", "plan": "alpha-reserved", "count": 2}
    ]
    on_plan = [e for e in recorded if e.get("plan")]
    assert {(e["type"], e.get("reason")) for e in on_plan} >= {
        ("admitted", None),
        ("preempted", "plan_ended"),
    }
    assert simulate.run(scenario)["events"] == recorded

    rec = signals.Recording(scenario, recorded, out["teams"])
    queue_figures = signals.compute(rec, 0, 301_000)["queue"]
    assert queue_figures["plan_utilization"]["alpha-reserved"] is not None
    assert queue_figures["plan_first_rate"] == pytest.approx(2 / 3)  # early fell back
    assert queue_figures["cost"]["alpha-reserved"]["total"] > 0
