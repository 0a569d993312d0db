"""Capacity plans (docs/scheduling.md#capacity-plans): a plan's pool and its fit, victims and count
drop.

A plan is a pool of its own, beside the queue's pools of on-demand capacity: its
``count`` instances of one type for one share during ``[start, end)``. Jobs on it count
neither in the share's usage against its limits nor in the type's total, so nothing of
the entitlement accounting (limits, RESERVE idle, borrowing, reclaim) reaches it,
and no on-demand placement or ``set_capacity`` ever stops a job on it. What it shares
with a type's pool is the running index (usage, the share's priorities, victim order),
so :class:`PlanPool` is a :class:`~scheduler.engine.state.Pool` whose entitlement
bookkeeping is switched off.

The rules, for a job of the plan's share asking ``n`` of the plan:

* fits without preemption when the plan is active and its usage + n <= its count;
* fits with preemption, when the share has in-share preemption on and n <= the plan's
  count, by stopping the share's lower-priority jobs on the plan: one greedy pass in
  victim order until it fits, then the minimal set (reverse pick order);
* a count drop below usage stops jobs on the plan (``capacity_lost``): one greedy pass
  in victim order, then the minimal set.
"""

from __future__ import annotations

from scheduler.engine.model import InstanceType, Job, Plan, Rule, ShareConfig
from scheduler.engine.preemption import (
    LostWork,
    give_back,
    in_share_candidates,
    share_order,
    victim_order,
)
from scheduler.engine.state import Pool, PoolFacts, SearchResult


class PlanPool(Pool):
    """One plan's instances and the jobs running on them.

    ``name`` is the plan's pool key (:func:`scheduler.engine.model.plan_pool`), ``spec``
    the plan's instance type (speed, accelerated flag), ``capacity`` the plan's count and
    ``active`` whether the engine's current instant lies in ``[start, end)``.
    ``started`` / ``ended`` record which of the plan's two instants the engine has passed.
    """

    __slots__ = ("active", "ended", "plan", "started")

    is_plan = True

    def __init__(
        self,
        plan: Plan,
        spec: InstanceType,
        shares: dict[str, ShareConfig],
        capacity: int | None = None,
        counted: bool = True,
    ) -> None:
        self.plan = plan
        self.active = False
        self.started = False
        self.ended = False
        super().__init__(spec, shares, plan.count if capacity is None else capacity, counted)
        self.name = plan.pool

    def _settle(self, share: str, before: int, after: int) -> None:
        """No entitlements on a plan: nothing is RESERVE idle, nobody borrows."""

    def recount(self) -> None:
        """No entitlements on a plan (see ``_settle``)."""

    def empty_like(self, counted: bool = True) -> PlanPool:
        clone = PlanPool(self.plan, self.spec, self.shares, self.capacity, counted)
        clone.active = self.active
        clone.started = self.started
        clone.ended = self.ended
        return clone

    def room(self, share: str) -> int:
        """Largest count the share can place on the plan without preemption (-1: none)."""
        if not self.active or share != self.plan.share:
            return -1
        return max(0, self.capacity - self.total)

    def largest(self, share: str) -> int:
        """Largest count any job of the share could place here now, with or without
        preemption (-1: none): an upper bound for the candidate index."""
        room = self.room(share)
        if room < 0:
            return -1
        if self.shares[share].in_share_preemption:
            return self.capacity
        return room


def plan_search(
    pool: PlanPool,
    facts: PoolFacts,
    lost: LostWork,
    share: str,
    count: int,
    priority: int,
) -> SearchResult:
    """Victims on the plan that make room for ``count`` (rule ``priority``), or None.

    Only a job asking at most the plan's count may preempt, and only the share's jobs on
    the plan with strictly lower priority are candidates (in-share preemption on), those
    that are not preemptible excepted."""
    if pool.room(share) < 0 or count > pool.capacity:
        return None
    if not pool.shares[share].in_share_preemption:
        return None
    lower, held = pool.lower(share, priority)
    need = pool.total + count - pool.capacity  # instances the victims must free
    if need <= 0:
        return (), 0
    if held < need:
        return None
    key = (share, count, lower, False)
    if key in facts.search:
        return facts.search[key]
    picks: list[tuple[Job, str]] = []
    freed = 0
    for victim in in_share_candidates(share_order(pool, facts, lost, share), lower):
        picks.append((victim, Rule.PRIORITY))
        freed += victim.count
        if freed >= need:
            break
    if freed < need:  # jobs that are not preemptible held the rest
        facts.search[key] = None
        return None

    def keeps_fit(pick: tuple[Job, str]) -> bool:
        nonlocal freed
        if freed - pick[0].count >= need:
            freed -= pick[0].count
            return True
        return False

    give_back(picks, keeps_fit)
    result: SearchResult = (tuple(picks), 0)
    facts.search[key] = result
    return result


def plan_count_drop(pool: PlanPool, lost: LostWork, excess: int) -> list[Job]:
    """Jobs to stop when the plan's count drops ``excess`` below its usage: one greedy
    pass over the plan's jobs in victim order, then the minimal set."""
    picks: list[Job] = []
    freed = 0
    for victim in victim_order(pool.jobs(), lost):
        if freed >= excess:
            break
        picks.append(victim)
        freed += victim.count

    def keeps_fit(victim: Job) -> bool:
        nonlocal freed
        if freed - victim.count >= excess:
            freed -= victim.count
            return True
        return False

    give_back(picks, keeps_fit)
    return picks
