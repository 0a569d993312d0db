"""What services call after a change that can alter a scheduling decision.

The live scheduler (scheduler.tasks) asks for a cycle of the queue once the transaction
commits, so a rolled-back change never triggers one and the cycle sees the committed state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import transaction

# Queues whose scheduling cycle is running in this thread: a change the cycle makes itself
# (a simulated completion) is decided on by that same cycle, so asking for another one
# would only run a cycle that finds nothing to do (one per cycle, under a steady load).
_cycling: ContextVar[frozenset[int]] = ContextVar("cycling", default=frozenset())


@contextmanager
def cycle_running(queue_id: int) -> Iterator[None]:
    """Within this block, changes to ``queue_id`` ask for no further cycle."""
    token = _cycling.set(_cycling.get() | {queue_id})
    try:
        yield
    finally:
        _cycling.reset(token)


# Set while a caller collects the queues its changes touch, to run their cycle itself.
_collecting: ContextVar[set[int] | None] = ContextVar("collecting", default=None)


@contextmanager
def collect_changes() -> Iterator[set[int]]:
    """Within this block, changed queues are gathered in the yielded set, not requested:
    the caller runs their cycle itself once its transaction committed (or requests it)."""
    changed: set[int] = set()
    token = _collecting.set(changed)
    try:
        yield changed
    finally:
        _collecting.reset(token)


def queue_changed(queue_id: int) -> None:
    """Ask for a scheduling cycle of ``queue_id`` after the current transaction commits."""
    if queue_id in _cycling.get():
        return
    collecting = _collecting.get()
    if collecting is not None:
        collecting.add(queue_id)
        return

    def _request() -> None:
        from scheduler import triggers

        triggers.request_cycle(queue_id)

    transaction.on_commit(_request)
