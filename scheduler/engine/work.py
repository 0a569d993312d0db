"""Work and lost work of a job (DESIGN section 2, "Work and lost work").

Work is exact (``int`` or ``Fraction``): work done at ``t`` is the last reported progress
plus ``(t - report) x speed`` (none during restart overhead), capped at the duration;
checkpoints fall at whole multiples of the interval; lost work is work done minus the
checkpointed work.
"""

from __future__ import annotations

from fractions import Fraction

from scheduler.engine.model import Job, JobState, Work


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
    work = job.work_done
    if now > begin:
        work = work + (now - begin) * speed
    if job.duration is not None and work > job.duration:
        work = job.duration
    return norm(work)


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
    """Work a preemption at ``now`` would throw away."""
    return norm(work_at(job, speed, now) - checkpoint_at(job, speed, now))


def finish_time(job: Job, speed: Work) -> int | None:
    """When a running job with a known duration completes if left alone."""
    if job.state is not JobState.RUNNING or job.duration is None:
        return None
    begin = max(job.progress_at or 0, (job.run_started_at or 0) + job.run_overhead)
    remaining = job.duration - job.work_done
    needed = remaining if speed == 1 else Fraction(remaining) / speed
    return begin + max(0, ceil(needed))
