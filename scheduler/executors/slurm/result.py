"""What one pass of the Slurm executor did (``SyncResult``): the pass's answer, and
the counters its steps add to."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.cycle.result import CycleResult


@dataclass
class SyncResult:
    queue_id: int
    paused: bool = False
    skipped: str = ""
    submitted: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    stopped: int = 0
    capacity: dict[str, int] | None = None
    nodes_lost: bool = False  # a run ended as its node failed: capacity is read again
    drift: list[int] = field(default_factory=list)
    """Slurm jobs the drift guard found beyond what the product admitted."""
    drift_cancels: list[int] = field(default_factory=list)  # of those, the ones it cancels
    cycle: CycleResult | None = None
    errors: list[str] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    """Slurm jobs whose end the pass recorded (a hook's answer lists them: the epilogs of
    their nodes need not call)."""
