"""Fits with preemption (docs/scheduling.md): victim order, greedy pick, minimal set.

Victims are taken in one order (:func:`scheduler.engine.state.victim_key`): lower
priority, least work lost, most recently started, id descending. A search is one greedy
pass (reclaim from borrowers of other shares, then lower-priority jobs of the share)
until the placement fits, then :func:`give_back` returns victims in reverse pick order
while it still fits. A capacity drop picks the same way, borrowers first.

Everything reads a pool and its facts and never changes them; the cycle applies the
result. ``lost`` gives a running job's lost work now (the victim order's second key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from scheduler.engine import accounting
from scheduler.engine.model import Job, Policy, Rule, ShareConfig, Work
from scheduler.engine.state import Bound, Pool, PoolFacts, SearchResult, victim_key

LostWork = Callable[[Job], Work]
T = TypeVar("T")


def victim_order(jobs: Iterable[Job], lost: LostWork) -> list[Job]:
    """``jobs`` sorted in victim order."""
    return sorted(jobs, key=lambda job: victim_key(job, lost(job)))


def reclaim_order(pool: Pool, facts: PoolFacts, lost: LostWork) -> list[Job]:
    """Running jobs of the shares borrowing on the pool, in victim order (reclaim group:
    the victim order restricted to them, so only they need sorting)."""
    if facts.reclaim_order is None:
        facts.reclaim_order = victim_order(
            (job for name in facts.borrowers for job in pool.running[name].values()), lost
        )
    return facts.reclaim_order


def share_order(pool: Pool, facts: PoolFacts, lost: LostWork, share: str) -> list[Job]:
    """Running jobs of one share on the pool in victim order (in-share group)."""
    found = facts.share_order.get(share)
    if found is None:
        found = facts.share_order[share] = victim_order(pool.running.get(share, {}).values(), lost)
    return found


def give_back(picks: list[T], keeps_fit: Callable[[T], bool]) -> None:
    """Minimal victim set: in reverse pick order, drop every victim without which the
    placement still fits (``keeps_fit`` decides, and books the victim as given back)."""
    for index in range(len(picks) - 1, -1, -1):
        if keeps_fit(picks[index]):
            del picks[index]


def reclaim_terms(shares: dict[str, ShareConfig], pool: Pool, facts: PoolFacts) -> dict[str, int]:
    """Per borrower on the pool, what reclaim could take from it at most: a borrower
    loses jobs only while still borrowing, so its borrowed amount plus one job less one."""
    terms = {}
    for other in facts.borrowers:
        used = pool.usage[other]
        over = accounting.borrowed(shares[other].limits.get(pool.name, 0), used)
        terms[other] = min(used, over + pool.biggest(other) - 1)
    return terms


def fits_after(
    shares: dict[str, ShareConfig],
    pool: Pool,
    facts: PoolFacts,
    share: str,
    count: int,
    removed: dict[str, int],
    freed: int,
    own_only: bool,
) -> bool:
    """Would the placement fit without preemption once ``removed`` (instances per share,
    ``freed`` in all) is set aside? ``own_only``: only within the share's limit."""
    cfg = shares[share]
    name = pool.name
    lim = cfg.limits.get(name, 0)
    used = pool.usage.get(share, 0) - removed.get(share, 0)
    reserved = facts.reserve_idle - accounting.reserved_idle(
        cfg.policy, lim, pool.usage.get(share, 0)
    )
    for other, amount in removed.items():
        if other == share:
            continue
        ocfg = shares[other]
        if ocfg.policy is Policy.RESERVE:
            olim = ocfg.limits.get(name, 0)
            oused = pool.usage.get(other, 0)
            reserved += accounting.idle(olim, oused - amount) - accounting.idle(olim, oused)
    if count > accounting.free(pool.capacity, pool.total - freed, reserved):
        return False
    if used + count <= lim:
        return True
    if own_only or cfg.policy is not Policy.LEND_AND_BORROW:
        return False
    cap = cfg.borrow_cap(name)
    return cap is None or used + count - lim <= cap


def preemption_may_help(bound: Bound, count: int, lower_held: int) -> bool:
    """Necessary condition for a fit with preemption: victims free at most what they
    hold, reclaim at most ``bound.base`` and only for an own placement, in-share victims
    at most ``lower_held`` (which also lowers the share's usage). Monotone: a smaller
    count or more held below the job's priority never turns it False."""
    if count > bound.base + lower_held:
        return False
    if count - lower_held <= bound.own_room:
        return True
    return lower_held > 0 and count - lower_held <= bound.borrow_room


def search(
    shares: dict[str, ShareConfig],
    pool: Pool,
    facts: PoolFacts,
    lost: LostWork,
    bound: Bound,
    share: str,
    count: int,
    priority: int,
    time_sensitive: set[str],
    own_only: bool = False,
) -> SearchResult:
    """Victims that make a placement fit, or None (docs/scheduling.md, "When a job may stop other
    jobs").

    Only a job within its share's limit may preempt. If the share is under its limit,
    first one pass for an own placement over reclaim then in-share candidates; else (or
    if that fails) in-share candidates alone for any placement. ``bound`` (see
    :func:`scheduler.engine.placement.bound`) rules out most hopeless searches first.
    ``own_only``: the job may not borrow, so every placement must stay within the limit
    (``bound`` is then :func:`scheduler.engine.placement.own_bound`). Jobs that are not
    preemptible are never in-share candidates.
    """
    lim = bound.limit
    if lim < 0 or count > lim:
        return None
    lower = lower_held = 0
    if bound.in_share:
        lower, lower_held = pool.lower(share, priority)
    if not preemption_may_help(bound, count, lower_held):
        return None  # even every candidate together would not make it fit
    key = (share, count, lower, own_only)
    if key in facts.search:
        return facts.search[key]
    own_lower = in_share_candidates(share_order(pool, facts, lost, share), lower)
    result = None
    if pool.usage.get(share, 0) < lim:
        result = _greedy(
            shares, pool, facts, lost, share, count, own_lower, True, time_sensitive, True
        )
    if result is None and own_lower:
        result = _greedy(
            shares, pool, facts, lost, share, count, own_lower, own_only, time_sensitive, False
        )
    facts.search[key] = result
    return result


def in_share_candidates(ordered: list[Job], lower: int) -> list[Job]:
    """The first ``lower`` jobs of a share's victim order (those below the preempting
    job's priority) less those that are not preemptible."""
    if not lower:
        return []
    candidates = ordered[:lower]
    if all(job.preemptible for job in candidates):
        return candidates
    return [job for job in candidates if job.preemptible]


def _greedy(
    shares: dict[str, ShareConfig],
    pool: Pool,
    facts: PoolFacts,
    lost: LostWork,
    share: str,
    count: int,
    own_lower: list[Job],
    own_placement: bool,
    time_sensitive: set[str],
    reclaim: bool,
) -> SearchResult:
    """One greedy pass, then the minimal set. ``reclaim``: reclaim then in-share
    candidates, otherwise in-share candidates alone; ``own_placement``: the placement
    must stay within the share's limit (always with reclaim)."""
    removed: dict[str, int] = {}
    freed = 0
    picks: list[tuple[Job, str]] = []
    fits = False
    skipped_borrower = False
    reserved_for = facts.reserve_idle - accounting.reserved_idle(
        shares[share].policy, shares[share].limits.get(pool.name, 0), pool.held(share)
    )
    # victims add at most what they hold to the room, so no fit is possible before:
    need = count - (pool.capacity - pool.total - reserved_for)
    if reclaim:
        for victim in reclaim_order(pool, facts, lost):
            other = victim.share
            if other == share:
                continue
            taken = removed.get(other, 0)
            if pool.usage[other] - taken <= shares[other].limits.get(pool.name, 0):
                skipped_borrower = True  # no longer borrowing once picks are set aside
                continue
            picks.append((victim, Rule.RECLAIM))
            removed[other] = taken + victim.count
            freed += victim.count
            if freed >= need and fits_after(
                shares, pool, facts, share, count, removed, freed, True
            ):
                fits = True
                break
    if not fits:
        for victim in own_lower:
            picks.append((victim, Rule.PRIORITY))
            removed[share] = removed.get(share, 0) + victim.count
            freed += victim.count
            if freed >= need and fits_after(
                shares, pool, facts, share, count, removed, freed, own_placement
            ):
                fits = True
                break
    if not fits:
        if skipped_borrower:
            time_sensitive.add(pool.name)  # another victim order might have fitted
        return None

    def keeps_fit(pick: tuple[Job, str]) -> bool:
        nonlocal freed
        victim = pick[0]
        removed[victim.share] -= victim.count
        if fits_after(
            shares, pool, facts, share, count, removed, freed - victim.count, own_placement
        ):
            freed -= victim.count
            return True
        removed[victim.share] += victim.count
        return False

    give_back(picks, keeps_fit)
    used = pool.usage.get(share, 0) - removed.get(share, 0)
    lim = shares[share].limits.get(pool.name, 0)
    return tuple(picks), accounting.borrowed(lim, used + count) - accounting.borrowed(lim, used)


def capacity_lost(
    shares: dict[str, ShareConfig], pool: Pool, lost: LostWork, excess: int
) -> list[Job]:
    """Jobs to stop when capacity drops ``excess`` below usage: one greedy pass over jobs
    of shares still borrowing (re-judged after each pick), then over any job, in victim
    order, then the minimal set."""
    ordered = victim_order(pool.jobs(), lost)
    removed: dict[str, int] = {}
    freed = 0
    picks: list[Job] = []
    for borrowing_only in (True, False):
        for victim in ordered:
            if freed >= excess:
                break
            if victim in picks:
                continue
            share = victim.share
            if borrowing_only:
                lim = shares[share].limits.get(pool.name, 0)
                if pool.usage.get(share, 0) - removed.get(share, 0) <= lim:
                    continue
            picks.append(victim)
            removed[share] = removed.get(share, 0) + victim.count
            freed += victim.count

    def keeps_fit(victim: Job) -> bool:
        nonlocal freed
        if freed - victim.count >= excess:
            freed -= victim.count
            return True
        return False

    give_back(picks, keeps_fit)
    return picks
