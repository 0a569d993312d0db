"""Forecasts of pending jobs' starts, checked against values worked out by hand."""

from __future__ import annotations

from scheduler.engine import Engine, InstanceType, Job, JobState, Policy, Preference, ShareConfig
from scheduler.engine.forecast import coarsen, play_forward

G = "ml.g5.xlarge"


def _running(job_id: str, share: str, count: int, started: int = 0) -> Job:
    return Job(
        job_id,
        share,
        1,
        0,
        (Preference(G, count),),
        state=JobState.RUNNING,
        instance_type=G,
        count=count,
        preference=0,
        run_started_at=started,
        started_at=started,
    )


def _engine(capacity: int = 2) -> Engine:
    return Engine(
        [InstanceType(G, capacity)],
        [ShareConfig("A", {G: 2}, Policy.RESERVE), ShareConfig("B", {G: 0}, Policy.RESERVE)],
    )


def test_starts_follow_finishes_in_cycle_order() -> None:
    """Capacity 2, both held by r1 (ends at 100) and r2 (ends at 300).

    Cycle order: p1 (priority 5), p2 (priority 1, submitted at 1), p3 (priority 1,
    submitted at 2, needs 2). At 100 r1 ends and p1 starts (50 of work: ends at 150).
    At 150 p2 starts (200 of work: ends at 350). At 300 r2 ends, one instance is free:
    p3 needs two and waits. At 350 p2 ends and p3 starts.
    """
    engine = _engine()
    engine.restore([_running("r1", "A", 1), _running("r2", "A", 1)])
    engine.submit(Job("p2", "A", 1, 1, (Preference(G, 1),), duration=200))
    engine.submit(Job("p3", "A", 1, 2, (Preference(G, 2),), duration=10))
    engine.submit(Job("p1", "A", 5, 3, (Preference(G, 1),), duration=50))
    assert engine.schedule(10) == []
    forecast = play_forward(engine, 10, {"r1": 100, "r2": 300})
    assert forecast.position == {"p1": 1, "p2": 2, "p3": 3}
    assert forecast.starts == {"p1": 100, "p2": 150, "p3": 350}
    assert (forecast.running, forecast.running_known, forecast.stopped_at) == (2, 2, None)
    assert forecast.basis().startswith("engine playback, remaining work known for 2 of 2")


def test_unknown_remaining_work_gives_no_estimate() -> None:
    """r2 has no known end: p1 starts when r1 ends, p2 never in this playback."""
    engine = _engine()
    engine.restore([_running("r1", "A", 1), _running("r2", "A", 1)])
    engine.submit(Job("p1", "A", 5, 1, (Preference(G, 1),)))  # no duration either
    engine.submit(Job("p2", "A", 1, 2, (Preference(G, 1),), duration=10))
    forecast = play_forward(engine, 10, {"r1": 40})
    assert forecast.starts == {"p1": 40}
    assert (forecast.running, forecast.running_known) == (2, 1)
    assert "1 of 2 running jobs (the others are taken never to finish)" in forecast.basis()


def test_time_factor_and_horizon() -> None:
    """A fleet running 2x the clock does 100 of work in 50; a horizon of 60 stops
    playback before p2's start at 10 + 50 + 50 = 110."""
    engine = _engine(capacity=1)
    engine.set_share("A", limits={G: 1})
    engine.restore([_running("r1", "A", 1)])
    engine.submit(Job("p1", "A", 5, 1, (Preference(G, 1),), duration=100))
    engine.submit(Job("p2", "A", 1, 2, (Preference(G, 1),), duration=100))
    assert play_forward(engine.copy(), 10, {"r1": 10}, time_factor=2.0).starts == {
        "p1": 10,
        "p2": 60,
    }
    bounded = play_forward(engine.copy(), 10, {"r1": 60}, time_factor=2.0, horizon=60)
    assert bounded.starts == {"p1": 60}
    assert bounded.stopped_at == 110
    assert "stopped at its horizon" in bounded.basis()


def test_timeout_in_playback() -> None:
    """An accelerated job with max pending 20 times out at 21 before r1 ends at 50."""
    engine = _engine(capacity=1)
    engine.set_share("A", limits={G: 1})
    engine.restore([_running("r1", "A", 1)])
    engine.submit(Job("p1", "A", 5, 1, (Preference(G, 1),), max_pending=20, duration=5))
    forecast = play_forward(engine, 10, {"r1": 50})
    assert forecast.starts == {}
    assert forecast.timed_out == {"p1"}


def test_coarsen_rounds_up_by_about_one_percent_in_order() -> None:
    """Steps of 1 within 100 ahead, 2 within 200, 4 within 400, ... on multiples."""
    assert coarsen(1090, 1000, 1, 100) == 1090  # 90 ahead: step 1
    assert coarsen(1141, 1000, 1, 100) == 1142  # 141 ahead: step 2
    assert coarsen(1301, 1000, 1, 100) == 1304  # 301 ahead: step 4
    assert coarsen(999, 1000, 1, 100) == 999  # not ahead: as is
    previous = 0
    for at in range(1000, 5000):
        rounded = coarsen(at, 1000, 1, 100)
        assert at <= rounded <= at + max(1, (at - 1000) // 50)
        assert rounded >= previous
        previous = rounded


def test_rounded_playback_merges_close_finishes() -> None:
    """r1 ends at 1,000,301 and r2 at 1,000,302 (ms), about 300 ahead of now: with
    steps of 4 both round up to 1,000,304, one instant, when p1 and p2 both start."""
    engine = _engine()
    now = 1_000_000
    engine.restore([_running("r1", "A", 1), _running("r2", "A", 1)])
    engine.submit(Job("p1", "A", 5, 1, (Preference(G, 1),), duration=10))
    engine.submit(Job("p2", "A", 4, 1, (Preference(G, 1),), duration=10))
    forecast = play_forward(
        engine, now, {"r1": now + 301, "r2": now + 302}, relative=100, min_step=1
    )
    assert forecast.starts == {"p1": now + 304, "p2": now + 304}
    assert "to within about 1% of the time ahead" in forecast.basis()
