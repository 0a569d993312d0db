"""Where a pending job would run: fits without preemption and the preference choice.

A job of share S asking ``n`` of a pool fits without preemption when ``n <=
maxfit(S)``: within ``free(S,T)`` (:mod:`scheduler.engine.accounting`) and either within
its limit or, for ``LEND_AND_BORROW``, within its borrow cap. :func:`choose` is the
preference choice of docs/scheduling.md: the first preference that fits without preemption, else
the first that fits with preemption (:func:`scheduler.engine.preemption.search`).

:func:`bound` and :func:`largest_possible` are exact necessary conditions the candidate
index uses to rule out whole classes of jobs at once; :func:`own_possible` says whether
any placement of a class could stay within the share's limit.

A plan's pool (:class:`~scheduler.engine.plans.PlanPool`) has its own rules
(:mod:`scheduler.engine.plans`); each function here hands a plan's pool to them, so the
cycle and the candidate index treat both kinds alike. A plan placement never borrows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

from scheduler.engine import accounting
from scheduler.engine.model import Job, Policy, ShareConfig
from scheduler.engine.plans import PlanPool, plan_search
from scheduler.engine.preemption import LostWork, reclaim_terms, search
from scheduler.engine.state import Bound, Pool, PoolFacts

_new_tuple = tuple.__new__

_HUGE = 1 << 62


@dataclass(frozen=True, slots=True)
class Placement:
    """Where and how a pending job would run, and whom it would stop for it."""

    preference: int
    instance_type: str
    count: int
    borrowed: int
    victims: tuple[tuple[Job, str], ...] = ()
    """(victim, rule) in pick order; rule is ``reclaim`` or ``priority``."""
    plan: str | None = None
    """The plan it runs on (None: on-demand capacity of ``instance_type``)."""
    pool: str = ""
    """The pool key it runs on (the type's name, or the plan's pool key)."""


def maxfit(shares: dict[str, ShareConfig], pool: Pool, facts: PoolFacts, share: str) -> int:
    """Largest count the share can place on the pool without preemption (-1: none)."""
    if pool.is_plan:  # an attribute, not isinstance: this is the hottest test
        return cast(PlanPool, pool).room(share)
    room = facts.maxfit.get(share)
    if room is None:
        _room(shares, pool, facts, share)
        room = facts.maxfit[share]
    return room


def own_fit(
    shares: dict[str, ShareConfig], pool: Pool, facts: PoolFacts, share: str, own_only: bool
) -> int:
    """:func:`maxfit` for a job that may (``own_only`` False) or may not borrow: for the
    latter its share counts as one that cannot borrow (within free room and its limit)."""
    room = maxfit(shares, pool, facts, share)
    if own_only and not pool.is_plan and room > 0:
        lim = shares[share].limits.get(pool.name)
        if lim is not None:
            own = lim - pool.usage.get(share, 0)
            if own < room:
                return own
    return room


def own_bound(b: Bound) -> Bound:
    """A share's bound as seen by a job that may not borrow: no borrowing room."""
    return Bound(min(b.maxfit, b.own_room), b.limit, b.base, b.in_share, b.own_room, -_HUGE)


def borrowed_after(shares: dict[str, ShareConfig], pool: Pool, share: str, count: int) -> int:
    """How many of ``count`` more instances would lie beyond the share's limit."""
    if pool.is_plan:
        return 0
    lim = shares[share].limits.get(pool.name, 0)
    used = pool.usage.get(share, 0)
    return accounting.borrowed(lim, used + count) - accounting.borrowed(lim, used)


def bound(shares: dict[str, ShareConfig], pool: Pool, facts: PoolFacts, share: str) -> Bound:
    """The share's room on the pool for the necessary conditions (cached per state)."""
    found = facts.bound.get(share)
    if found is None:
        _room(shares, pool, facts, share)
        found = facts.bound[share]
    return found


def largest_possible(
    shares: dict[str, ShareConfig], pool: Pool, facts: PoolFacts, share: str
) -> int:
    """Largest count any job of the share could place on the pool now, whatever its
    priority, with or without preemption (-1: none): a job asking more surely fails."""
    if pool.is_plan:
        return cast(PlanPool, pool).largest(share)
    found = facts.largest.get(share)
    if found is None:
        _room(shares, pool, facts, share)
        found = facts.largest[share]
    return found


def _room(shares: dict[str, ShareConfig], pool: Pool, facts: PoolFacts, share: str) -> None:
    """:func:`maxfit`, :func:`bound` and :func:`largest_possible` of one share, at once
    (cached per state): a change of the pool needs all three of most shares."""
    cfg = shares[share]
    name = pool.name
    lim = cfg.limits.get(name)
    if lim is None:
        facts.maxfit[share] = facts.largest[share] = -1
        facts.bound[share] = Bound(-1, -1, 0, False, -_HUGE, -_HUGE)
        return
    # accounting.reserved_idle and accounting.free written out: this runs for most
    # shares after every change of a pool
    used = pool.usage.get(share, 0)
    own_room = lim - used
    policy = cfg.policy
    reserved_by_others = facts.reserve_idle
    if policy is Policy.RESERVE and own_room > 0:
        reserved_by_others -= own_room
    base = pool.capacity - pool.total - reserved_by_others
    free = base if base > 0 else 0
    if policy is Policy.LEND_AND_BORROW:
        cap = cfg.borrow_cap(name)
        borrow_room = _HUGE if cap is None else lim + cap - used
        fit = min(free, free if cap is None else max(own_room, borrow_room))
    else:
        borrow_room = -_HUGE
        fit = min(free, own_room)
    facts.maxfit[share] = fit
    if used < lim:
        terms = facts.reclaim
        if terms is None:
            terms = facts.reclaim = reclaim_terms(shares, pool, facts)
            facts.reclaim_total = sum(terms.values())
        base += facts.reclaim_total - terms.get(share, 0)
    # tuple.__new__, not Bound(...): the named tuple's constructor is a Python-level
    # function around it, and this runs for most shares after every change of a pool
    b = _new_tuple(Bound, (fit, lim, base, cfg.in_share_preemption, own_room, borrow_room))
    facts.bound[share] = b
    # the largest count ``preemption_may_help`` admits (it is monotone in the count), with
    # every running job of the share below the job's priority
    held = used if b.in_share else 0
    reach = own_room + held
    if held > 0:
        reach = max(reach, borrow_room + held)
    facts.largest[share] = max(fit, min(lim, base + held, reach))


def own_possible(
    shares: dict[str, ShareConfig], pool: Pool, share: str, count: int, priority: int
) -> bool:
    """Could a job of the share asking ``count`` (or more) be placed within the share's
    limit, its in-share victims set aside? False rules out a non-borrowing placement."""
    if pool.is_plan:
        return True  # a plan placement never borrows: whether it fits is all that counts
    cfg = shares[share]
    lim = cfg.limits.get(pool.name)
    if lim is None:
        return False
    room = lim - pool.usage.get(share, 0)
    if count <= room:
        return True
    if not cfg.in_share_preemption:
        return False
    return count <= room + pool.lower(share, priority)[1]


Resolve = Callable[[str], tuple[Pool, PoolFacts, LostWork] | None]
"""A type name to its pool, the pool's facts and lost work (None: unknown type)."""


def fits(
    shares: dict[str, ShareConfig],
    pool: Pool,
    facts: PoolFacts,
    lost: LostWork,
    share: str,
    count: int,
    priority: int,
    time_sensitive: set[str],
    own_only: bool = False,
) -> bool:
    """Does a job of the share asking ``count`` fit on the pool, with or without
    preemption (``own_only``: a job that may not borrow)? Monotone: true for any
    smaller count and any higher priority."""
    if count <= maxfit(shares, pool, facts, share) and (
        not own_only or count <= own_fit(shares, pool, facts, share, True)
    ):
        return True
    if pool.is_plan:
        return plan_search(cast(PlanPool, pool), facts, lost, share, count, priority) is not None
    b = bound(shares, pool, facts, share)
    if own_only:
        b = own_bound(b)
    found = search(shares, pool, facts, lost, b, share, count, priority, time_sensitive, own_only)
    return found is not None


def _options(job: Job, resolve: Resolve) -> Iterator[tuple[int, int, Pool, PoolFacts, LostWork]]:
    """(index, count, pool, facts, lost work) of each eligible preference on a known
    type, in list order."""
    blocked = job.blocked
    for index, pref in enumerate(job.preferences):
        if blocked and blocked >> index & 1:
            continue  # not eligible now (its budget or the job's deadline)
        found = resolve(pref.pool)
        if found is not None:
            yield (index, pref.count, *found)


def first_without_preemption(
    shares: dict[str, ShareConfig], job: Job, resolve: Resolve
) -> Placement | None:
    """The first preference that fits without preemption."""
    own_only = not job.may_borrow
    for index, count, pool, facts, _ in _options(job, resolve):
        if count <= own_fit(shares, pool, facts, job.share, own_only):
            if pool.is_plan:
                return _placement(index, pool, count, 0)
            borrowed = borrowed_after(shares, pool, job.share, count)
            return Placement(index, pool.name, count, borrowed, (), None, pool.name)
    return None


def _placement(
    index: int, pool: Pool, count: int, borrowed: int, victims: tuple[tuple[Job, str], ...] = ()
) -> Placement:
    plan = pool.plan.name if isinstance(pool, PlanPool) else None
    return Placement(index, pool.spec.name, count, borrowed, victims, plan, pool.name)


def first_with_preemption(
    shares: dict[str, ShareConfig], job: Job, resolve: Resolve, time_sensitive: set[str]
) -> Placement | None:
    """The first preference that fits with preemption, and its victims."""
    own_only = not job.may_borrow
    for index, count, pool, facts, lost in _options(job, resolve):
        if isinstance(pool, PlanPool):
            result = plan_search(pool, facts, lost, job.share, count, job.priority)
        else:
            b = bound(shares, pool, facts, job.share)
            if own_only:
                b = own_bound(b)
            result = search(
                shares,
                pool,
                facts,
                lost,
                b,
                job.share,
                count,
                job.priority,
                time_sensitive,
                own_only,
            )
        if result is not None:
            victims, borrowed = result
            return _placement(index, pool, count, borrowed, victims)
    return None


def choose(
    shares: dict[str, ShareConfig], job: Job, resolve: Resolve, time_sensitive: set[str]
) -> Placement | None:
    """Preference choice: the first preference that fits without preemption, else the
    first that fits with preemption, else None."""
    return first_without_preemption(shares, job, resolve) or first_with_preemption(
        shares, job, resolve, time_sensitive
    )
