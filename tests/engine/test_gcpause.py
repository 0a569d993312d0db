"""The collector is paused around a replay and as it was afterwards, even when the
replay fails (scheduler/gcpause.py): a what-if or a signals pass never leaves a worker
without its garbage collector."""

from __future__ import annotations

import gc

import pytest

from scheduler import simulate
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
