"""Cycle requests, coalesced in the real Redis (scheduler/triggers.py): a burst of changes
sends one task; a task whose request a cycle that started since covered is dropped, so a
worker that fell behind runs no stale cycles; a timer is an ordinary request when due."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scheduler import tasks, triggers

QUEUE = 987_654  # no such queue: nothing here runs a cycle's body


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, tuple[Any, ...], float]]]:
    """The tasks the triggers send (task name, args, countdown), instead of the broker's
    queue, which a live test's worker may be reading; and the queue's keys cleared."""
    out: list[tuple[str, tuple[Any, ...], float]] = []

    def send(task: str, queue_id: int, *args: object, countdown: float = 0.0) -> None:
        out.append((task, (queue_id, *args), countdown))

    monkeypatch.setattr(triggers, "_send", send)
    keys = [k.format(queue_id=QUEUE) for k in (triggers.COUNT_KEY, triggers.PENDING_KEY)]
    keys.append(triggers.TIMER_KEY.format(queue_id=QUEUE))
    triggers.client().delete(*keys)
    yield out
    triggers.client().delete(*keys)


def test_a_burst_of_requests_sends_one_task(sent: list[Any]) -> None:
    for _ in range(5):
        assert triggers.request_cycle(QUEUE)
    assert sent == [(triggers.CYCLE_TASK, (QUEUE, 1), 0.0)]


def test_a_started_cycle_covers_the_requests_made_before_it(sent: list[Any]) -> None:
    triggers.request_cycle(QUEUE)  # task for request 1
    assert triggers.cycle_starting(QUEUE, 1)
    triggers.request_cycle(QUEUE)  # the flag went: request 2 sends a task
    triggers.request_cycle(QUEUE)  # request 3 rides on it
    assert [args for _, args, _ in sent] == [(QUEUE, 1), (QUEUE, 2)]
    assert triggers.cycle_starting(QUEUE, 2)  # covers 2 and 3
    assert not triggers.cycle_starting(QUEUE, 2)  # a stale copy of the task: dropped
    assert not triggers.cycle_starting(QUEUE, 3)
    triggers.request_cycle(QUEUE)  # request 4, made after that cycle started
    assert triggers.cycle_starting(QUEUE, 4)


def test_a_flag_that_outlived_its_task_sends_a_second_task_which_is_dropped(
    sent: list[Any],
) -> None:
    """The broker queue was long: the flag's time ran out while request 1's task waited,
    and request 2 sent another; the first to run covers both."""
    triggers.request_cycle(QUEUE)
    triggers.client().delete(triggers.PENDING_KEY.format(queue_id=QUEUE))  # the TTL ran out
    triggers.request_cycle(QUEUE)
    assert [args for _, args, _ in sent] == [(QUEUE, 1), (QUEUE, 2)]
    assert triggers.cycle_starting(QUEUE, 1)
    assert not triggers.cycle_starting(QUEUE, 2)


def test_the_safety_net_and_old_tasks_always_run(sent: list[Any]) -> None:
    triggers.request_cycle(QUEUE)
    assert triggers.cycle_starting(QUEUE, 1)
    assert triggers.cycle_starting(QUEUE, None)
    assert triggers.cycle_starting(QUEUE, None)


def test_a_cycle_task_dropped_as_covered_runs_no_cycle(sent: list[Any]) -> None:
    triggers.request_cycle(QUEUE)
    triggers.cycle_starting(QUEUE, 1)
    answer = tasks.schedule_queue.run(QUEUE, 1)
    assert answer["skipped"].startswith("a cycle started since covered")


def test_a_timer_is_a_request_when_due_and_a_cycle_clears_it(sent: list[Any]) -> None:
    triggers.request_cycle_at(QUEUE, 30)
    triggers.request_cycle_at(QUEUE, 60)  # later than the one waiting: dropped
    assert sent == [(triggers.TIMER_TASK, (QUEUE,), 30)]
    timer = triggers.TIMER_KEY.format(queue_id=QUEUE)
    assert triggers.cycle_starting(QUEUE)
    assert triggers.client().get(timer) is not None  # not due yet: it stays
    tasks.cycle_timer.run(QUEUE)  # when due
    assert sent[-1] == (triggers.CYCLE_TASK, (QUEUE, 1), 0.0)
    triggers.client().set(timer, 0)  # as if its time had come
    assert triggers.cycle_starting(QUEUE, 1)
    assert triggers.client().get(timer) is None
    triggers.request_cycle_at(QUEUE, 60)  # the next one may be set now
    assert sent[-1] == (triggers.TIMER_TASK, (QUEUE,), 60)


def test_no_timer_is_set_while_a_cycle_asked_for_has_yet_to_start(sent: list[Any]) -> None:
    """That cycle sets the timer it needs when it ends: a busy queue, whose next cycle is
    always asked for by the time one ends, sends no timer task per cycle."""
    triggers.request_cycle(QUEUE)
    triggers.request_cycle_at(QUEUE, 30)
    assert sent == [(triggers.CYCLE_TASK, (QUEUE, 1), 0.0)]
    assert triggers.client().get(triggers.TIMER_KEY.format(queue_id=QUEUE)) is None
    assert triggers.cycle_starting(QUEUE, 1)  # it starts, and at its end:
    triggers.request_cycle_at(QUEUE, 30)
    assert sent[-1] == (triggers.TIMER_TASK, (QUEUE,), 30)


def test_without_redis_a_request_says_so_and_a_cycle_runs(sent: list[Any], settings: Any) -> None:
    kept = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    triggers.client.cache_clear()
    triggers._starting.cache_clear()
    try:
        assert not triggers.request_cycle(QUEUE)
        assert triggers.cycle_starting(QUEUE, 1)
    finally:
        settings.REDIS_URL = kept
        triggers.client.cache_clear()
        triggers._starting.cache_clear()
    assert sent == []


@pytest.mark.django_db
def test_a_cycle_task_for_a_queue_gone_since_is_skipped(sent: list[Any]) -> None:
    assert triggers.request_cycle(QUEUE)
    assert tasks.schedule_queue.run(QUEUE, 1) == {"queue": QUEUE, "skipped": "no such queue"}
