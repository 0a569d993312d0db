"""Constrained fallback: which preferences of a pending job are eligible, and when it
times out for its deadline (docs/scheduling.md#deadline-and-budget).

A job may give a ``deadline`` (a time) and a ``max_cost`` (in the currency of the hourly
prices); a preference may give ``runtime``, the expected run time of the job on it.
The expected run time of preference ``p`` is

* ``R = overhead + ceil(remaining / speed)`` for a job with a ``duration``, remaining
  being the duration less the checkpointed work and speed that of p's type;
* ``R = overhead + p.runtime`` for a job without one (checkpoints do not shorten it);
* unknown otherwise: the preference is then always eligible;

with ``overhead`` the job's restart overhead once it has been preempted, else 0. Its
expected cost is ``C = count x hourly_price x R / hour`` (exact; ``hour`` is the number
of time units in an hour, a plan preference uses the plan's price). A preference is
**not eligible** at ``t`` when ``C > max_cost`` (``over_budget``, checked first) or when
``t + R > deadline`` (``deadline_unreachable``).

While a job is pending nothing of R or C moves (its remaining work, overhead, speeds and
prices are fixed until it runs again), so eligibility only shrinks with time: a budget
rules a preference out for the whole wait, a deadline from one instant on. The engine
computes both once per wait (:func:`constrain`) and keeps on the job the mask of
preferences not eligible at its instant (``Job.blocked``), which the candidate index,
the preference choice and the tentative placement all read.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from scheduler.engine.model import Job, Preference, Work
from scheduler.engine.work import ceil

OVER_BUDGET = "over_budget"
DEADLINE_UNREACHABLE = "deadline_unreachable"

HOUR_SECONDS = 3600
HOUR_MS = 3_600_000

Lookup = Callable[[Preference], tuple[Work, Work] | None]
"""A preference to (speed, hourly price) of where it runs; None: unknown there."""


def expected_runtime(job: Job, pref: Preference, speed: Work) -> int | None:
    """R of the job on ``pref`` (time units), or None when it cannot be known."""
    overhead = job.restart_overhead if job.preemptions else 0
    if job.duration is not None:
        remaining = job.duration - job.last_checkpoint
        if remaining <= 0:
            return overhead
        needed = remaining if speed == 1 else Fraction(remaining) / speed
        return overhead + ceil(needed)
    if pref.runtime is not None:
        return overhead + pref.runtime
    return None


def expected_cost(count: int, price: Work, runtime: int, hour: int) -> Work:
    """C = count x hourly price x R / hour, exact."""
    cost = Fraction(count * price * runtime, hour)
    return cost.numerator if cost.denominator == 1 else cost


def constrain(job: Job, lookup: Lookup, hour: int) -> None:
    """Set the job's ``over_budget`` mask, ``last_eligible`` instants and ``timeout_at``
    for the wait that starts now (R and C are fixed until it runs again)."""
    job.over_budget = 0
    job.last_eligible = ()
    job.timeout_at = None
    deadline = job.deadline
    max_cost = job.max_cost
    if deadline is None and max_cost is None:
        return
    over = 0
    last: list[int | None] = []
    for index, pref in enumerate(job.preferences):
        found = lookup(pref)
        runtime = None if found is None else expected_runtime(job, pref, found[0])
        if (
            runtime is not None
            and max_cost is not None
            and found is not None
            and expected_cost(pref.count, found[1], runtime, hour) > max_cost
        ):
            over |= 1 << index
        last.append(None if runtime is None or deadline is None else deadline - runtime)
    job.over_budget = over
    if deadline is None:
        return
    job.last_eligible = tuple(last)
    within = [last[i] for i in range(len(last)) if not over >> i & 1]
    if within and all(at is not None for at in within):
        job.timeout_at = max(at for at in within if at is not None) + 1


def blocked_at(job: Job, now: int | None) -> int:
    """Mask of the job's preferences not eligible at ``now`` (None: budget alone)."""
    blocked = job.over_budget
    if now is not None:
        for index, at in enumerate(job.last_eligible):
            if at is not None and now > at:
                blocked |= 1 << index
    return blocked


def ineligible_code(job: Job, index: int, now: int) -> str | None:
    """``over_budget`` or ``deadline_unreachable`` for preference ``index`` at ``now``,
    or None when it is eligible."""
    if job.over_budget >> index & 1:
        return OVER_BUDGET
    if job.last_eligible:
        at = job.last_eligible[index]
        if at is not None and now > at:
            return DEADLINE_UNREACHABLE
    return None
