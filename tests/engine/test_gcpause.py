"""The collector is paused around a replay and as it was afterwards, even when the
replay fails (scheduler/gcpause.py): a what-if or a signals pass never leaves a worker
without its garbage collector."""

from __future__ import annotations

import gc
import weakref

import pytest

from scheduler import simulate
from scheduler.engine import Engine, InstanceType, Job, Preference, ShareConfig
from scheduler.gcpause import gc_paused


def test_a_replay_runs_with_the_collector_paused_and_leaves_it_on() -> None:
    seen: list[bool] = []

    @gc_paused()
    def replay() -> None:
        seen.append(gc.isenabled())

    assert gc.isenabled()
    replay()
    assert seen == [False] and gc.isenabled()


def test_a_failing_replay_leaves_the_collector_on() -> None:
    with pytest.raises(simulate.ScenarioError):
        simulate.run({"shares": "not a list"})
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_block_inside_a_paused_one_leaves_it_paused() -> None:
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_engine_is_freed_without_the_collector() -> None:
    """An engine holds no reference cycle (the candidate index does not point back at
    the state): dropped by its last user, it is freed at once, not by a collector pass
    over every one of its jobs after a paused replay."""
    engine = Engine([InstanceType("ml.g5.xlarge", 4)], [ShareConfig("a", {"ml.g5.xlarge": 2})])
    engine.submit(Job("j1", "a", 1, 0, (Preference("ml.g5.xlarge", 1),)))
    engine.submit(Job("j2", "a", 1, 0, (Preference("ml.g5.xlarge", 8),)))
    engine.schedule(0)
    state = weakref.ref(engine._state)
    with gc_paused():
        del engine
        assert state() is None
