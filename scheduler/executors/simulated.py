"""The simulated fleet: the built-in executor that runs a queue's jobs on no hardware.

A run does its job's work at the type's speed times ``DEMO_TIME_FACTOR`` (simulated
seconds per real second, 60 in the demo: an hour a minute), checkpoints every
``checkpoint_interval`` of work, and completes when its work is done. It needs no
process of its own: the scheduler's cycle asks it (``SimulatedFleet``, the ``Executor``
of ``scheduler/executors/base.py``) which runs are done by now (and completes them first,
as the order within one moment (docs/scheduling.md) wants), how far each running job has
got, and when the next run will finish (to wake up then). It has no hooks: nothing
outside the database to tell.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from governance.models import Job, JobQueue
from governance.models.capacity import Executor
from governance.services import runs
from scheduler.executors.base import BaseExecutor


def runs_itself(queue: JobQueue) -> bool:
    """Whether the product runs this queue's jobs itself (and so knows their progress)."""
    return queue.executor == Executor.SIMULATED


def time_factor(queue: JobQueue) -> float:
    """Simulated seconds per real second: the demo fleet runs faster than the clock."""
    return float(settings.DEMO_TIME_FACTOR) if runs_itself(queue) else 1.0


def restart_overhead(job: Job) -> float:
    """Seconds of preparation before a run after a preemption does work."""
    return float(job.restart_overhead) if job.run > 1 and job.preemptions else 0.0


def finish(job: Job, speed: float, factor: float) -> datetime | None:
    """When a running job finishes its remaining work (None without a duration)."""
    if job.duration is None or job.run_started_at is None:
        return None
    seconds = (restart_overhead(job) + max(0.0, job.duration - job.work_done) / speed) / factor
    return job.run_started_at + timedelta(seconds=seconds)


def work(job: Job, now: datetime, speed: float, factor: float) -> float:
    """Work the running job has done by ``now``."""
    return runs.current_work(job, now, speed=speed, time_factor=factor)


class SimulatedFleet(BaseExecutor):
    """The simulated fleet as the cycle's executor: it runs the jobs itself, at
    ``DEMO_TIME_FACTOR`` (read when the cycle looks it up)."""

    runs_itself = True

    def __init__(self) -> None:
        self.time_factor = float(settings.DEMO_TIME_FACTOR)

    def finish(self, job: Job, speed: float) -> datetime | None:
        return finish(job, speed, self.time_factor)

    def work(self, job: Job, now: datetime, speed: float) -> float:
        return work(job, now, speed, self.time_factor)
