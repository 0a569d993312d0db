"""Signals of closed windows served from the store (docs/signals.md#stored-answers): a
stored answer equals a fresh computation on the same recorded history, it is reused
while nothing recorded since can change it, and a late executor report, a late job or a
renamed share makes the next answer fresh again.

The history is the one ``tests/services/test_history.py`` drives: reclaims, a cancel, a
capacity change and a share edit in its first 100 seconds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from governance.models import Job, JobEvent, SignalAnswer
from governance.selectors import scheduling
from scheduler import history
from tests.factories import make_job
from tests.services.test_history import (  # noqa: F401
    G5,
    Clock,
    at,
    clock,
    run_history,
    world,
)

pytestmark = pytest.mark.django_db

WINDOWS = [(-1, 400), (5, 45), (12, 30), (30, 60), (50, 400)]
LATER = timedelta(hours=2)  # every window above has ended long enough ago to be stored


def _figures(answer: dict[str, Any]) -> dict[str, Any]:
    """The figures of an answer, without the window and queue the API adds."""
    queue = {k: v for k, v in answer["queue"].items() if k not in ("id", "name")}
    return {"queue": queue, "groups": answer["groups"]}


def _answer(world: Any, lo: float, hi: float, group_by: str) -> dict[str, Any]:  # noqa: F811
    return _figures(scheduling.queue_signals(world.queue, at(lo), at(hi), group_by=group_by))


def _fresh(world: Any, clock: Clock, lo: float, hi: float, group_by: str) -> dict[str, Any]:  # noqa: F811
    return _figures(
        history.window_signals(world.queue, at(lo), at(hi), now=clock.now, group_by=group_by)
    )


@pytest.mark.parametrize("group_by", ["share", "team"])
def test_a_stored_answer_equals_a_fresh_computation(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
    group_by: str,
) -> None:
    run_history(world, clock)
    clock.now = at(400) + LATER
    first = {(lo, hi): _answer(world, lo, hi, group_by) for lo, hi in WINDOWS}
    assert SignalAnswer.objects.filter(queue=world.queue, group_by=group_by).count() == len(WINDOWS)
    for lo, hi in WINDOWS:
        fresh = _fresh(world, clock, lo, hi, group_by)
        again = _answer(world, lo, hi, group_by)
        # exactly the same figures, from the store and computed afresh
        assert again == first[(lo, hi)] == fresh, (lo, hi)


def test_the_store_answers_without_reading_the_history(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
    django_assert_max_num_queries: Any,
) -> None:
    run_history(world, clock)
    clock.now = at(400) + LATER
    stored = _answer(world, 5, 45, "share")
    # the row, the digest (shares, types, plans, certifications) and three probes for late rows
    with django_assert_max_num_queries(8):
        assert _answer(world, 5, 45, "share") == stored


def test_a_window_still_open_is_not_stored(world: Any, clock: Clock) -> None:  # noqa: F811
    run_history(world, clock)
    clock.now = at(400)
    _answer(world, 300, 400, "share")
    assert not SignalAnswer.objects.exists()


def test_a_late_executor_report_makes_the_next_answer_fresh(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
) -> None:
    run_history(world, clock)
    clock.now = at(400) + LATER
    before = _answer(world, -1, 400, "share")
    # an executor reports, hours later, that a job failed at 35 s
    late = Job.objects.filter(queue=world.queue, name="a1").get()
    JobEvent.objects.create(job=late, at=at(35), type="preempted", data={"reason": "capacity_lost"})
    after = _answer(world, -1, 400, "share")
    assert after != before
    assert after == _fresh(world, clock, -1, 400, "share")
    alpha = next(g for g in after["groups"] if g["share"] == "alpha")
    old = next(g for g in before["groups"] if g["share"] == "alpha")
    suffered = alpha["preemptions_suffered"]["capacity_lost"]
    assert suffered == old["preemptions_suffered"]["capacity_lost"] + 1


def test_a_late_job_or_a_renamed_share_makes_the_next_answer_fresh(
    world: Any,  # noqa: F811
    clock: Clock,  # noqa: F811
) -> None:
    run_history(world, clock)
    clock.now = at(400) + LATER
    before = _answer(world, -1, 400, "share")
    make_job(
        world.alpha,
        world.red_lead,
        name="late",
        submitted_at=at(200),
        preferences=[{"instance_type": G5, "count": 1}],
        duration=10,
    )
    with_job = _answer(world, -1, 400, "share")
    assert with_job == _fresh(world, clock, -1, 400, "share") != before
    world.beta.name = "beta-renamed"
    world.beta.save(update_fields=["name"])
    renamed = _answer(world, -1, 400, "share")
    assert [g["share"] for g in renamed["groups"]] == ["alpha", "beta-renamed"]
    assert renamed == _fresh(world, clock, -1, 400, "share")
