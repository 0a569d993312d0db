"""How services tell the scheduler that something changed, without importing it.

Services call :func:`queue_changed` after a change that can alter a scheduling decision;
the scheduler app registers what that means at start-up (``scheduler.apps``), so the
services never import the scheduler and a governance-only process (a migration, a shell)
simply has no scheduler listening. A cycle is requested once the transaction commits, so a
rolled-back change never triggers one and the cycle sees the committed state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from django.db import transaction

log = logging.getLogger(__name__)

# What is left of a piece of work, handed to whoever runs it later.
Defer = Callable[[Callable[[], None]], None]


class ExecutorPass(Protocol):
    def __call__(
        self, queue_id: int, slurm_job_id: int, /, *, defer: Defer | None = None
    ) -> dict[str, object]: ...


@dataclass
class _Listener:
    request_cycle: Callable[[int], object] | None = None
    """Ask for a cycle of a queue soon (the scheduler's coalesced trigger)."""
    run_cycle: Callable[[int], object] | None = None
    """Run a cycle of a queue in this process, now."""
    executor_pass: ExecutorPass | None = None
    """Run the executor's pass of a queue run by Slurm in this process, now, for the end
    of one Slurm job."""


_listener = _Listener()


def register(
    *,
    request_cycle: Callable[[int], object],
    run_cycle: Callable[[int], object],
    executor_pass: ExecutorPass | None = None,
) -> None:
    """The scheduler's start-up hook: how to ask for a cycle, how to run one now, and how
    to run a Slurm queue's executor pass now."""
    _listener.request_cycle = request_cycle
    _listener.run_cycle = run_cycle
    _listener.executor_pass = executor_pass


def run_executor_pass(
    queue_id: int, slurm_job_id: int, *, defer: Defer | None = None
) -> dict[str, object] | None:
    """Run the executor's pass of ``queue_id`` in this process because Slurm job
    ``slurm_job_id`` ended (the Slurm completion hook); None when no scheduler listens in
    this process. With ``defer``, the pass returns once the job's node may go and hands
    what is left of it to ``defer``, for the caller to run after it answered."""
    if _listener.executor_pass is None:
        return None
    return _listener.executor_pass(queue_id, slurm_job_id, defer=defer)


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
    request = _listener.request_cycle
    if request is not None:
        transaction.on_commit(lambda: request(queue_id))


def run_cycles_now(queue_ids: Iterable[int]) -> None:
    """Run the cycles of ``queue_ids`` in this process (after the caller's commit), so the
    caller sees their decisions in its answer; a failure falls back to a request."""
    for queue_id in sorted(queue_ids):
        try:
            if _listener.run_cycle is not None:
                _listener.run_cycle(queue_id)
        except Exception:  # the change stands; the worker decides instead
            log.exception("in-request cycle of queue %s failed; asking the worker", queue_id)
            if _listener.request_cycle is not None:
                _listener.request_cycle(queue_id)
