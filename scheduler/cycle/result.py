"""What one cycle did (``CycleResult``): the cycle's answer, and what it hands to the
executor's ``after_commit``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from governance.services import insight
from scheduler.cycle import usage


@dataclass
class CycleResult:
    queue_id: int
    admitted: int = 0
    preempted: int = 0
    timed_out: int = 0
    completed: int = 0
    next_event_in: float | None = None
    """Seconds until the next time-driven event (a simulated completion, a timeout)."""
    now: datetime | None = None
    read: str = ""
    """How the cycle read the queue: ``kept`` (only what changed, on the engine this
    process kept, ``scheduler.cycle.kept``), or ``full`` with why when not the first."""
    caught_up: int = 0
    """Cycles other processes ran since the kept engine's, whose changes this one read."""
    levels: list[insight.Level] = field(default_factory=list)
    """What the cycle leaves running, for the usage history."""

    def record_usage(self) -> None:
        """Record ``levels`` in the usage history, in a transaction of its own: for an
        executor that defers it (``Executor.defers_usage``) until it has done what must
        come first (the Slurm pass: its stops and submissions)."""
        assert self.now is not None
        usage.record_alone(self.queue_id, self.levels, self.now)
