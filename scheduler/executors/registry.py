"""Which executor runs a queue's jobs (``executor_for``): the queue's ``executor`` field."""

from __future__ import annotations

from governance.models import JobQueue
from governance.models.capacity import Executor as ExecutorKind
from scheduler.executors.agents import AgentExecutor
from scheduler.executors.base import Executor
from scheduler.executors.simulated import SimulatedFleet
from scheduler.executors.slurm.executor import SlurmExecutor


def executor_for(queue: JobQueue) -> Executor:
    """The executor a cycle of ``queue`` calls. For a Slurm queue outside a pass (a cycle a
    change to the queue asked for) that is the idle ``SlurmExecutor``: the cycle only
    decides, and the next pass reports, submits and stops."""
    if queue.executor == ExecutorKind.SIMULATED:
        return SimulatedFleet()
    if queue.executor == ExecutorKind.SLURM:
        return SlurmExecutor()
    return AgentExecutor()
