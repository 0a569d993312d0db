"""Work and lost work of a job (docs/scheduling.md, "Work and lost work"), written once.

Work done at ``t`` is the last reported progress plus ``(t - report) x speed`` (none
during restart overhead), capped at the duration; checkpoints fall at whole multiples
of the interval; lost work is work done minus the checkpointed work, never below 0.

The engine works on exact numbers (``int`` or ``Fraction``) through the job functions;
the services use the same two rules (:func:`work_done`, :func:`lost_work`) on floats for
runs the product does not execute itself (agents, Slurm), where "the last reported
progress" is the executor's last report.
"""

from __future__ import annotations

from fractions import Fraction

from scheduler.engine.model import Job, JobState, Work

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


def norm(value: Work) -> Work:
    """A whole Fraction back to an int, so equal work compares and prints the same."""
    if type(value) is Fraction and value.denominator == 1:
        return value.numerator
    return value


def ceil(value: Work) -> int:
    return int(-((-value) // 1))


def work_at(job: Job, speed: Work, now: int) -> Work:
    """Work the job has done by ``now``: its last report extrapolated at ``speed``, none
    during restart overhead, capped at its duration."""
    if job.state is not JobState.RUNNING or job.instance_type is None:
        return job.work_done
    begin = max(job.progress_at or 0, (job.run_started_at or 0) + job.run_overhead)
    done = work_done(
        progress=job.work_done, since=begin, now=now, rate=speed, duration=job.duration
    )
    return norm(done)  # type: ignore[arg-type]  # exact in, exact out


def checkpoint_at(job: Job, speed: Work, now: int) -> Work:
    """Work saved by the job's last checkpoint at ``now`` (whole multiples of its
    interval carry over between runs)."""
    saved = job.last_checkpoint
    interval = job.checkpoint_interval
    if interval:
        periodic = (work_at(job, speed, now) // interval) * interval
        if periodic > saved:
            saved = periodic
    return norm(saved)


def lost_work_at(job: Job, speed: Work, now: int) -> Work:
    """Work a preemption at ``now`` would throw away (never below 0): the work done
    less the checkpoint (:func:`checkpoint_at` written out, so the work is worked out
    once: every victim order sorts by it)."""
    work = work_at(job, speed, now)
    saved = job.last_checkpoint
    interval = job.checkpoint_interval
    if interval:
        periodic = (work // interval) * interval
        if periodic > saved:
            saved = periodic
    lost = work - saved
    return norm(lost) if lost > 0 else 0


def finish_time(job: Job, speed: Work) -> int | None:
    """When a running job completes if left alone: from its duration, or, without one,
    after its preference's expected ``runtime`` (plus restart overhead); None when it
    has neither (it runs until stopped)."""
    if job.state is not JobState.RUNNING:
        return None
    if job.duration is None:
        if job.preference is None or job.run_started_at is None:
            return None
        runtime = job.preferences[job.preference].runtime
        return None if runtime is None else job.run_started_at + job.run_overhead + runtime
    begin = max(job.progress_at or 0, (job.run_started_at or 0) + job.run_overhead)
    remaining = job.duration - job.work_done
    needed = remaining if speed == 1 else Fraction(remaining) / speed
    return begin + max(0, ceil(needed))
