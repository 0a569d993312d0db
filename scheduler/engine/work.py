"""Work and lost work (DESIGN section 2, "Work and lost work"), written once.

A run's work at time ``t`` is the latest progress known for it plus the time since then
at the run's rate, capped at the job's duration when it has one; lost work at a
preemption is that minus the checkpointed work, never below 0. The engine extrapolates
its runs with these, and the services use them for runs the product does not execute
itself (agents, Slurm), where "latest progress" is the executor's last report. Times and
work may be exact (int, Fraction) or floats: the functions keep the caller's kind.
"""

from __future__ import annotations

from fractions import Fraction

Num = int | float | Fraction


def work_done(
    *, progress: Num, since: Num, now: Num, rate: Num, duration: Num | None = None
) -> Num:
    """Work at ``now`` of a run that had done ``progress`` at ``since`` and advances by
    ``rate`` work units per time unit (the type's speed, times the simulated fleet's
    time factor); nothing is done before ``since``."""
    work = progress
    if now > since:
        work = work + (now - since) * rate
    if duration is not None and work > duration:
        work = duration
    return work


def lost_work(*, work: Num, checkpoint: Num) -> Num:
    """Work a preemption throws away: what was done since the last checkpoint."""
    lost = work - checkpoint
    return lost if lost > 0 else 0
