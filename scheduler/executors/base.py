"""What a cycle asks of the executor that runs a queue's jobs (``Executor``), and the
defaults an executor starts from (``BaseExecutor``).

The cycle (``scheduler/cycle/run.py``) looks the executor up from the queue
(``scheduler.executors.registry.executor_for``) and calls it at fixed points of its one
transaction; docs/architecture.md#adding-an-executor walks through an implementation.
An executor sees the cycle only through the public types it is handed (``QueueSnapshot``,
``CycleResult``), never through its phases.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from governance.models import Job, JobQueue
from scheduler.cycle.result import CycleResult
from scheduler.cycle.snapshot import QueueSnapshot
from scheduler.engine import Decision


class Executor(Protocol):
    """Where a queue's admitted jobs run, as the cycle sees it.

    Progress (read phase): an executor that ``runs_itself`` knows how far each run has
    got (``work``) and when it ends (``finish``): the cycle asks it. Any other executor
    reports starts, checkpoints and ends through ``services/runs.py``, and the cycle
    reads what was reported.

    Hooks, in the order of a cycle (docs/architecture.md#a-cycle):

    1. ``before_cycle(queue)``: the queue is locked, nothing read yet: write the reports
       that must count in this very cycle (a completion frees capacity for it).
    2. ``within_cycle(snapshot, decisions)``: the decisions are applied, the rows still
       locked: write what must commit with the admissions (the Slurm pass: the rows of
       the runs it will submit, so a lost answer is never submitted twice).
    3. ``after_commit(result)``: committed: tell the outside world (stop, submit).
    """

    @property
    def time_factor(self) -> float:
        """Executor seconds per real second (the simulated fleet may run faster than the
        clock; every real executor: 1)."""

    @property
    def runs_itself(self) -> bool:
        """Whether the product runs the jobs itself, so knows their progress and ends."""

    @property
    def defers_usage(self) -> bool:
        """Whether the executor records the cycle's usage history itself, once it has
        done what must come first (``CycleResult.record_usage``); else the cycle records
        it in its transaction."""

    def finish(self, job: Job, speed: float) -> datetime | None:
        """When a running job of a queue it ``runs_itself`` finishes (None: by a report,
        or never by itself)."""

    def work(self, job: Job, now: datetime, speed: float) -> float:
        """Work a running job of a queue it ``runs_itself`` has done by ``now``."""

    def before_cycle(self, queue: JobQueue) -> None: ...

    def within_cycle(self, snapshot: QueueSnapshot, decisions: Sequence[Decision]) -> None: ...

    def after_commit(self, result: CycleResult) -> None: ...


class RunCycle(Protocol):
    """The cycle's entry point as a driver is handed it (``scheduler.cycle.run.run_cycle``).

    An executor that must poll its cluster drives its own passes (the Slurm pass): it
    reads the cluster, then runs the queue's cycle with an executor carrying what it
    read. It is handed the entry point by whoever starts the pass (a Celery task, the
    scheduler's receiver of the completion hook), so no executor imports the cycle: the
    cycle calls the executor, never the other way round."""

    def __call__(self, queue_id: int, *, executor: Executor) -> CycleResult: ...


class BaseExecutor:
    """The defaults: runs that something outside reports (agents pull their runs, the
    Slurm pass reports what Slurm says), at the clock's pace, no hooks. Subclass it and
    override what your executor does."""

    time_factor = 1.0
    runs_itself = False
    defers_usage = False

    def finish(self, job: Job, speed: float) -> datetime | None:
        return None

    def work(self, job: Job, now: datetime, speed: float) -> float:
        return float(job.work_done)

    def before_cycle(self, queue: JobQueue) -> None:
        return None

    def within_cycle(self, snapshot: QueueSnapshot, decisions: Sequence[Decision]) -> None:
        return None

    def after_commit(self, result: CycleResult) -> None:
        return None
