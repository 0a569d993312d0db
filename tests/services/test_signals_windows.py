"""The signals of a live queue for windows that start while jobs run (docs/signals.md,
"Rules of counting"): what the product answers for a window equals what the queue's
whole recording gives for it, runs going at the window's start count from there on, and
work is declared work whatever the simulated fleet's clock.

The history is the one ``tests/services/test_history.py`` drives (a simulated queue whose
cycles run at every moment something happens): b1 runs from 0 on two G5, a1 and b2
queue behind it, reclaims and a cancel follow, capacity and share edits at 40 and 45 s.
"""

from __future__ import annotations

from typing import Any

import pytest

from governance.models import JobEvent
from governance.selectors import scheduling
from scheduler import history, signals, simulate
from tests.factories import make_job
from tests.services.test_history import (  # noqa: F401
    G5,
    Clock,
    at,
    clock,
    drive,
    run_history,
    world,
)

pytestmark = pytest.mark.django_db

WINDOWS = [(-1, 400), (5, 45), (12, 30), (30, 60), (45, 60), (50, 400), (100, 101)]


def _figures(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k not in ("id", "name", "policy_changes")}


def _whole_recording(world: Any) -> signals.Recording:  # noqa: F811
    """The export of a window that starts before the first submission: a history file
    that gives exact figures for any window inside it."""
    return signals.file_recording(history.export(world.queue, at(-1), at(400)))


@pytest.mark.parametrize("group_by", ["share", "team"])
def test_every_window_counts_what_the_whole_recording_says(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
    group_by: str,
) -> None:
    run_history(world, clock)
    clock.now = at(400)
    whole = _whole_recording(world)
    for lo, hi in WINDOWS:
        answer = scheduling.queue_signals(world.queue, at(lo), at(hi), group_by=group_by)
        expected = signals.compute(whole, (lo + 1) * 1000, (hi + 1) * 1000, group_by=group_by)
        assert _figures(answer["queue"]) == _figures(expected["queue"]), (lo, hi)
        assert [_figures(g) for g in answer["groups"]] == [
            _figures(g) for g in expected["groups"]
        ], (lo, hi)


def _runs(world: Any) -> list[tuple[str, str, float, float | None, int]]:  # noqa: F811
    """Every run of the queue from its job events: (job, type, start, end, count), in
    seconds from T0, read straight from the database."""
    runs = []
    open_runs: dict[int, tuple[str, float, int]] = {}
    for event in JobEvent.objects.filter(job__queue=world.queue).order_by("at", "id"):
        t = (event.at - at(0)).total_seconds()
        if event.type == "admitted":
            open_runs[event.job_id] = (event.data["instance_type"], t, event.data["count"])
        elif event.type in ("preempted", "completed", "failed", "cancelled", "lost"):
            run = open_runs.pop(event.job_id, None)
            if run is not None:
                runs.append((str(event.job_id), run[0], run[1], t, run[2]))
    runs += [(str(j), r[0], r[1], None, r[2]) for j, r in open_runs.items()]
    return runs


def test_runs_going_at_the_start_count_from_the_start(world: Any, clock: Clock) -> None:  # noqa: F811
    """[45, 60): the instance-seconds are every run's overlap with the window, those that
    began before 45 included; the window's export alone would miss them."""
    run_history(world, clock)
    clock.now = at(400)
    lo, hi = 45, 60
    expected: dict[str, float] = {}
    for _, type_name, start, end, count in _runs(world):
        overlap = min(hi, 400 if end is None else end) - max(lo, start)
        if overlap > 0:
            expected[type_name] = expected.get(type_name, 0) + overlap * count
    answer = scheduling.queue_signals(world.queue, at(lo), at(hi))
    got = {t: v["total"] for t, v in answer["queue"]["instance_seconds"].items() if v["total"]}
    assert got == pytest.approx(expected, abs=1e-6)
    assert any(start < lo for _, _, start, end, _ in _runs(world) if end is None or end > lo)

    # what the window's export alone says: the runs going at 45 appear to start at 0
    out = history.export(world.queue, at(lo), at(hi))
    alone = signals.compute(
        signals.Recording(out["scenario"], out["recorded"]["events"], out["teams"]),
        0,
        (hi - lo) * 1000,
    )["queue"]
    assert alone["instance_seconds"] != answer["queue"]["instance_seconds"]


def test_first_starts_before_the_window_are_not_first_starts_in_it(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
) -> None:
    """Jobs first started before the window's start and started again in it (after a
    preemption) have no wait in it; their restart is timed from the preemption; their
    turnaround runs from their real submission."""
    jobs = run_history(world, clock)
    clock.now = at(400)
    events = list(JobEvent.objects.filter(job__queue=world.queue).order_by("at", "id"))
    seconds = {e.pk: (e.at - at(0)).total_seconds() for e in events}
    preempted = [e for e in events if e.type in ("preempted", "lost")]
    assert preempted
    first = preempted[0]
    cut = seconds[first.pk] + 0.5  # just after the first preemption
    answer = scheduling.queue_signals(world.queue, at(cut), at(400))["queue"]
    firsts = {}
    for e in events:
        if e.type == "admitted":
            firsts.setdefault(e.job_id, seconds[e.pk])
    submitted = {j.pk: (j.submitted_at - at(0)).total_seconds() for j in jobs.values()}
    waits = sorted(firsts[j] - submitted[j] for j in firsts if firsts[j] >= cut)
    assert sum(answer["fallback"]["by_preference"].values()) == len(waits)
    assert answer["wait_to_start"]["all"]["p50"] == (
        signals.percentile(waits, 50) if waits else None
    )
    restarts = []
    last_preempted: dict[int, float] = {}
    for e in events:
        if e.type in ("preempted", "lost"):
            last_preempted[e.job_id] = seconds[e.pk]
        elif e.type == "admitted" and e.job_id in last_preempted:
            if seconds[e.pk] >= cut:
                restarts.append(seconds[e.pk] - last_preempted[e.job_id])
            del last_preempted[e.job_id]
    assert restarts  # the preempted job starts again after the cut
    assert answer["time_to_restart"]["p50"] == pytest.approx(signals.percentile(restarts, 50))
    turnarounds = sorted(
        seconds[e.pk] - submitted[e.job_id]
        for e in events
        if e.type == "completed" and seconds[e.pk] >= cut
    )
    assert answer["turnaround"]["all"]["p90"] == pytest.approx(signals.percentile(turnarounds, 90))


def _fast_history(world: Any, clock: Clock) -> dict[str, Any]:  # noqa: F811
    """At DEMO_TIME_FACTOR 60: b1 (beta, two G5, 6,000 work-seconds: 100 s of the clock,
    one of them borrowed) from 0; a1 (alpha, one G5, 3,000 work-seconds) at 10 s reclaims
    it, so b1 loses the 600 work-seconds its run did (10 s x 60, no checkpoint)."""
    jobs: dict[str, Any] = {}

    def submit(name: str, share: Any, lead: Any, count: int, duration: int) -> Any:
        def step() -> None:
            jobs[name] = make_job(
                share,
                lead,
                name=name,
                submitted_at=clock.now,
                preferences=[{"instance_type": G5, "count": count}],
                duration=duration,
                priority=1,
            )

        return step

    steps = {
        0.0: submit("b1", world.beta, world.blue_lead, 2, 6000),
        10.0: submit("a1", world.alpha, world.red_lead, 1, 3000),
    }
    drive(world.queue, clock, steps, until=400)
    return jobs


def test_work_is_declared_work_on_the_fast_fleet(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
    settings: Any,
) -> None:
    """The simulated fleet at DEMO_TIME_FACTOR 60 does its work 60 times faster than the
    clock: lost work and goodput's W are still the declared work-seconds, the export still
    replays exactly, and every work figure in it is whole."""
    settings.DEMO_TIME_FACTOR = 60
    jobs = _fast_history(world, clock)
    clock.now = at(400)
    lost = [
        float(e.data["lost_work"])
        for e in JobEvent.objects.filter(job__queue=world.queue, type="preempted")
    ]
    assert lost == [pytest.approx(600)]
    assert all((j.refresh_from_db() or j.state) == "SUCCEEDED" for j in jobs.values())
    answer = scheduling.queue_signals(world.queue, at(-1), at(400))["queue"]
    assert answer["lost_work"] == pytest.approx(600, abs=1e-6)
    assert answer["goodput"] == pytest.approx(9000 / 9600, abs=1e-6)
    beta = scheduling.queue_signals(world.queue, at(5), at(15))["groups"][1]
    assert beta["share"] == "beta" and beta["lost_work"] == pytest.approx(600, abs=1e-6)

    out = history.export(world.queue, at(-1), at(400))
    replay = simulate.run(out["scenario"])
    assert replay["events"] == out["recorded"]["events"]
    assert replay["jobs"] == out["recorded"]["jobs"]
    assert sorted(j["duration"] for j in out["scenario"]["jobs"]) == [3_000_000, 6_000_000]
    assert [e["lost_work"] for e in out["recorded"]["events"] if "lost_work" in e] == [600_000]


def test_a_later_window_of_the_export_is_a_valid_scenario_with_whole_work(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
    settings: Any,
) -> None:
    """A window cutting through runs: the jobs going at its start get their remaining
    work as whole units, so the file is a scenario any reader takes as it is."""
    settings.DEMO_TIME_FACTOR = 60
    _fast_history(world, clock)
    clock.now = at(400)
    for lo in (5.3, 20.7, 61.1):
        out = history.export(world.queue, at(lo), at(400))
        assert not simulate.validate(out["scenario"])
        running = [j for j in out["scenario"]["jobs"] if j["submit_at"] == 0]
        assert running
        assert all(isinstance(j["duration"], int) and j["duration"] >= 1 for j in running)
        rows = out["recorded"]["jobs"]
        assert set(rows) == {j["id"] for j in out["scenario"]["jobs"]}
        assert all(row["started_at"] is None or row["started_at"] >= 0 for row in rows.values())


def test_a_whatif_shows_what_was_recorded_beside_its_replay(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
) -> None:
    """A what-if over a window that starts while jobs run: its result carries the
    window's recorded signals (the replay "as it was" re-decides the jobs going at its
    start), and the run's page shows them in a Recorded column."""
    from django.test import Client
    from rest_framework.test import APIClient

    from scheduler import tasks

    run_history(world, clock)
    clock.now = at(400)
    client = APIClient()
    client.force_authenticate(world.admin)
    window = {"from": at(45).isoformat(), "to": at(400).isoformat()}
    response = client.post(
        f"/api/queues/{world.queue.pk}/whatif/",
        {**window, "shares": {"beta": {"borrow_limit": 0}}},
        format="json",
    )
    assert response.status_code == 202, response.content
    tasks.run_whatif(response.json()["id"])
    result = client.get(f"/api/queues/{world.queue.pk}/whatif/{response.json()['id']}/").json()[
        "result"
    ]
    recorded = scheduling.queue_signals(world.queue, at(45), at(400))
    assert _figures(result["recorded"]["queue"]) == _figures(recorded["queue"])
    assert [_figures(g) for g in result["recorded"]["groups"]] == [
        _figures(g) for g in recorded["groups"]
    ]
    page = Client()
    page.force_login(world.admin)
    html = page.get(f"/whatif/{response.json()['id']}/").content.decode()
    assert ">Recorded</th>" in html and "As it was" in html


def test_the_scenario_runner_takes_an_exported_file_as_it_is(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
    settings: Any,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m scheduler.simulate FILE`` runs an export's scenario; with ``--check``
    it says whether the replay reproduces ``recorded`` (events and jobs), naming the
    first difference."""
    import json

    from django.core.management import call_command

    settings.DEMO_TIME_FACTOR = 60
    _fast_history(world, clock)
    clock.now = at(400)
    whole, later = tmp_path / "whole.json", tmp_path / "later.json"
    for path, lo in ((whole, -1), (later, 20.5)):
        call_command(
            "export_history",
            "hist",
            "--from",
            at(lo).isoformat(),
            "--to",
            at(400).isoformat(),
            "--output",
            str(path),
        )
    capsys.readouterr()
    assert simulate.main([str(whole), "--check"]) == 0
    assert "all expectations met" in capsys.readouterr().err
    assert simulate.main([str(later)]) == 0  # a window cutting through runs is valid
    capsys.readouterr()
    data = json.loads(whole.read_text())
    data["recorded"]["events"][1]["at"] += 1
    data["recorded"]["jobs"]["nobody"] = {"state": "PENDING"}
    whole.write_text(json.dumps(data))
    assert simulate.main([str(whole), "--check"]) == 1
    err = capsys.readouterr().err
    assert "events[1]: recorded" in err and "jobs.nobody" in err
