"""How services tell the scheduler that something changed, without importing it.

Services call :func:`queue_changed` after a change that can alter a scheduling decision;
it sends Django signals (``django.dispatch.Signal``) that the scheduler app connects to at
start-up (``scheduler.apps``), so the services never import the scheduler and a
governance-only process (a migration, a shell) simply has no scheduler listening. A cycle
is requested once the transaction commits, so a rolled-back change never triggers one and
the cycle sees the committed state.

The signals (each sent with ``sender=None``):

- :data:`cycle_wanted` (``queue_id``): ask for a cycle of the queue soon (the scheduler's
  coalesced trigger);
- :data:`cycle_now` (``queue_id``): run a cycle of the queue in this process, now;
- :data:`slurm_job_ended` (``queue_id``, ``slurm_job_id``, ``defer``): run the executor's
  pass of a queue run by Slurm in this process, now, for the end of one Slurm job; the
  receiver answers what the pass did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import transaction
from django.dispatch import Signal

log = logging.getLogger(__name__)

# What is left of a piece of work, handed to whoever runs it later.
Defer = Callable[[Callable[[], None]], None]

cycle_wanted = Signal()
cycle_now = Signal()
slurm_job_ended = Signal()


def run_executor_pass(
    queue_id: int, slurm_job_id: int, *, defer: Defer | None = None
) -> dict[str, object] | None:
    """Run the executor's pass of ``queue_id`` in this process because Slurm job
    ``slurm_job_id`` ended (the Slurm completion hook); None when no scheduler listens in
    this process. With ``defer``, the pass returns once the job's node may go and hands
    what is left of it to ``defer``, for the caller to run after it answered."""
    answers = slurm_job_ended.send(
        sender=None, queue_id=queue_id, slurm_job_id=slurm_job_id, defer=defer
    )
    for _receiver, answer in answers:
        if isinstance(answer, dict):
            return answer
    return None


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
    if cycle_wanted.has_listeners():
        transaction.on_commit(lambda: cycle_wanted.send(sender=None, queue_id=queue_id))


def run_cycles_now(queue_ids: Iterable[int]) -> None:
    """Run the cycles of ``queue_ids`` in this process (after the caller's commit), so the
    caller sees their decisions in its answer; a failure falls back to a request."""
    for queue_id in sorted(queue_ids):
        try:
            cycle_now.send(sender=None, queue_id=queue_id)
        except Exception:  # the change stands; the worker decides instead
            log.exception("in-request cycle of queue %s failed; asking the worker", queue_id)
            cycle_wanted.send(sender=None, queue_id=queue_id)
