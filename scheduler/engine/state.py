"""State of one queue and the indices kept on it (docs/scheduling.md).

A :class:`Pool` is one instance type's capacity and the running jobs that hold it, with
the per-share priority index in-share preemption needs. :class:`PoolFacts` are the values
derived from a pool's state (RESERVE idle, borrowers, room, victim order, search results),
computed on demand and dropped whenever the pool changes or time moves on.
:class:`QueueState` ties the pools, the shares and the jobs together and keeps the
change clock every incremental structure keys on (``touch``).

Capacity plans (docs/scheduling.md#capacity-plans) are a second kind of pool
(:class:`~scheduler.engine.plans.PlanPool`, kept in ``QueueState.plans``): a plan's own
capacity, running jobs and priority index, with its own fit rule (no limits, no
borrowing, no reclaim). Everything here that is not about entitlements (the running
index, victim order, the change clock, the candidate index keyed by pool key) is
pool-kind agnostic for that reason; ``QueueState.pool(key)`` finds either kind.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import count
from typing import NamedTuple

from scheduler.engine import accounting, constraints
from scheduler.engine.candidates import CandidateIndex
from scheduler.engine.model import (
    InstanceType,
    Job,
    JobState,
    Preference,
    ShareConfig,
    Work,
    exact,
    plan_pool,
)
from scheduler.engine.work import lost_work_at

# ---------------------------------------------------------------------------- victim order


class _Descending:
    """A string that sorts in reverse, so the victim order is one key (id descending)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __lt__(self, other: _Descending) -> bool:
        return other.text < self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


VictimKey = tuple[int, Work, int, _Descending]

_MARKS = count(1)
"""Stamps of a share's running jobs on a pool (``Pool.marks``): unique across pools, so
a stamp never names two different states, even of a pool built afresh."""


def victim_key(job: Job, lost_work: Work) -> VictimKey:
    """The victim order (docs/scheduling.md): lower priority first, then least work lost, then most
    recently started, then job id descending."""
    return (job.priority, lost_work, -(job.run_started_at or 0), _Descending(job.id))


# ---------------------------------------------------------------------------- pools


class Pool:
    """One instance type of the queue: capacity, usage per share and the running jobs.

    ``prios[share]`` holds the share's running priorities ascending and ``counts[share]``
    their counts alongside, so "what do the share's jobs below priority p hold" is a
    bisection (in-share preemption bounds).
    """

    is_plan = False
    """Class-level: True for a plan's pool (:class:`scheduler.engine.plans.PlanPool`)."""

    __slots__ = (
        "accelerated",
        "borrowers",
        "capacity",
        "counts",
        "marks",
        "name",
        "prios",
        "reserve_idle",
        "running",
        "shares",
        "sizes",
        "spec",
        "speed",
        "total",
        "usage",
    )

    def __init__(
        self,
        spec: InstanceType,
        shares: dict[str, ShareConfig],
        capacity: int | None = None,
        counted: bool = True,
    ) -> None:
        """``counted`` False leaves ``reserve_idle`` and ``borrowers`` for the caller to
        set (a copy of accounting it already has, without a pass over the shares)."""
        self.spec = spec
        self.shares = shares
        """The queue's share configurations (shared, not copied): entitlements."""
        self.name = spec.name
        self.capacity = spec.capacity if capacity is None else capacity
        self.speed: Work = exact(spec.speed)
        self.accelerated = spec.is_accelerated
        self.usage: dict[str, int] = {}
        self.total = 0
        self.running: dict[str, dict[str, Job]] = {}
        self.prios: dict[str, list[int]] = {}
        self.counts: dict[str, list[int]] = {}
        self.sizes: dict[str, dict[int, int]] = {}
        """Per share: how many running jobs hold each count (for the biggest one)."""
        self.marks: dict[str, int] = {}
        """Per share: a stamp taken whenever its running jobs here change (started,
        stopped, reprioritised); absent: it never ran any here. What the share alone
        could place within its limit depends on nothing else (``own_possible``)."""
        self.reserve_idle = 0
        """Idle entitlement of RESERVE shares (``accounting.reserved_idle`` summed)."""
        self.borrowers: set[str] = set()
        """Shares whose usage is above their limit."""
        if counted:
            self.recount()

    def empty_like(self, counted: bool = True) -> Pool:
        """A pool of the same kind and capacity with no running jobs (``counted``: as
        for the constructor)."""
        return Pool(self.spec, self.shares, self.capacity, counted)

    def _settle(self, share: str, before: int, after: int) -> None:
        """Keep ``reserve_idle`` and ``borrowers`` true after the share's usage moved."""
        cfg = self.shares[share]
        lim = cfg.limits.get(self.name, 0)
        # accounting.reserved_idle and accounting.borrowed written out: this runs at
        # every start and stop of a run
        if cfg.policy == accounting.RESERVE:
            self.reserve_idle += (lim - after if lim > after else 0) - (
                lim - before if lim > before else 0
            )
        if after > lim:
            self.borrowers.add(share)
        else:
            self.borrowers.discard(share)

    def recount(self) -> None:
        """Recompute ``reserve_idle`` and ``borrowers`` (after a share changed)."""
        self.reserve_idle = 0
        self.borrowers = set()
        for name, cfg in self.shares.items():
            lim = cfg.limits.get(self.name, 0)
            used = self.usage.get(name, 0)
            self.reserve_idle += accounting.reserved_idle(cfg.policy, lim, used)
            if accounting.borrowed(lim, used) > 0:
                self.borrowers.add(name)

    def add(self, job: Job) -> None:
        share = job.share
        before = self.usage.get(share, 0)
        self.usage[share] = before + job.count
        self._settle(share, before, before + job.count)
        self.total += job.count
        self.running.setdefault(share, {})[job.id] = job
        prios = self.prios.setdefault(share, [])
        index = bisect_right(prios, job.priority)
        prios.insert(index, job.priority)
        self.counts.setdefault(share, []).insert(index, job.count)
        sizes = self.sizes.setdefault(share, {})
        sizes[job.count] = sizes.get(job.count, 0) + 1
        self.marks[share] = next(_MARKS)

    def remove(self, job: Job) -> None:
        share = job.share
        before = self.usage[share]
        self.usage[share] = before - job.count
        if not self.usage[share]:
            del self.usage[share]
        self._settle(share, before, before - job.count)
        self.total -= job.count
        del self.running[share][job.id]
        self._unindex(share, job.priority, job.count)
        sizes = self.sizes[share]
        sizes[job.count] -= 1
        if not sizes[job.count]:
            del sizes[job.count]
        self.marks[share] = next(_MARKS)

    def reprioritise(self, job: Job, priority: int) -> None:
        """Move a running job to a new priority in the index (before ``job.priority``
        changes)."""
        self._unindex(job.share, job.priority, job.count)
        prios = self.prios[job.share]
        index = bisect_right(prios, priority)
        prios.insert(index, priority)
        self.counts[job.share].insert(index, job.count)
        self.marks[job.share] = next(_MARKS)

    def _unindex(self, share: str, priority: int, count: int) -> None:
        prios = self.prios[share]
        counts = self.counts[share]
        index = bisect_left(prios, priority)
        while counts[index] != count:
            index += 1
        del prios[index]
        del counts[index]

    def lower(self, share: str, priority: int) -> tuple[int, int]:
        """(how many, instances held) of the share's running jobs below ``priority``."""
        prios = self.prios.get(share)
        if not prios:
            return 0, 0
        below = bisect_left(prios, priority)
        return below, sum(self.counts[share][:below]) if below else 0

    def biggest(self, share: str) -> int:
        """The largest count among the share's running jobs (0: none)."""
        sizes = self.sizes.get(share)
        return max(sizes) if sizes else 0

    def held(self, share: str) -> int:
        return self.usage.get(share, 0)

    def jobs(self) -> list[Job]:
        return [job for per_share in self.running.values() for job in per_share.values()]


SearchResult = tuple[tuple[tuple[Job, str], ...], int] | None
"""Victims (job, rule) in pick order and the placement's borrowed count, or no fit."""


class Bound(NamedTuple):
    """What a share could at most reach on a pool, for the exact necessary conditions of
    :mod:`scheduler.engine.placement` (``limit`` -1: no limit on the type). A named
    tuple, not a frozen dataclass: one is made per share each time a pool changes, and a
    frozen dataclass's constructor costs several times a tuple's."""

    maxfit: int
    limit: int
    base: int
    """Free room plus what reclaim could free at most (0 when not under the limit)."""
    in_share: bool
    own_room: int
    borrow_room: int


@dataclass(slots=True)
class PoolFacts:
    """Values derived from one pool's state at one instant; dropped when either changes."""

    reserve_idle: int
    borrowers: frozenset[str]
    maxfit: dict[str, int] = field(default_factory=dict)
    bound: dict[str, Bound] = field(default_factory=dict)
    largest: dict[str, int] = field(default_factory=dict)
    reclaim: dict[str, int] | None = None
    """Per borrower, what reclaim could take from it at most."""
    reclaim_total: int = 0
    """The sum of ``reclaim`` (set with it)."""
    reclaim_order: list[Job] | None = None
    share_order: dict[str, list[Job]] = field(default_factory=dict)
    search: dict[tuple[str, int, int, bool], SearchResult] = field(default_factory=dict)


def pool_facts(pool: Pool) -> PoolFacts:
    """Fresh derived values of a pool, starting from its running accounting."""
    return PoolFacts(pool.reserve_idle, frozenset(pool.borrowers))


# ---------------------------------------------------------------------------- the queue


def _placeable_in(
    pools: dict[str, Pool], shares: dict[str, ShareConfig]
) -> Callable[[str, str], bool]:
    """The candidate index's test of whether a share may place anything on a pool (not a
    type it has no limit for). A closure over the two maps, not a bound method of the
    state: the index then holds no reference back to the state, so a whole engine is
    freed as soon as its last user drops it, without waiting for (and costing) a pass
    of the cyclic garbage collector over its objects (half a second after a
    100,000-job replay)."""

    def placeable(pool: str, share: str) -> bool:
        return pool not in pools or pool in shares[share].limits

    return placeable


class QueueState:
    """Everything one queue's engine knows, and the clock of its changes.

    ``clock`` counts changes; ``version[pool]`` is the clock of the pool's last change.
    ``touch`` records a change and tells the candidate index which shares' jobs it may
    help: all (``only_for`` None), or only one share's (an admission that leaves its
    share within its limit only adds usage for everyone else).
    """

    def __init__(
        self,
        instance_types: list[InstanceType],
        shares: list[ShareConfig],
        hour: int = constraints.HOUR_SECONDS,
    ) -> None:
        self.hour = hour
        """Time units in an hour (prices are hourly): 3600, or 3,600,000 in ms."""
        self.due: list[tuple[int, int, str]] = []
        """(``timeout_at``, seq, job id) of pending jobs that will time out for their
        deadline unless they start first (stale entries are skipped when read)."""
        self.hint = 0
        """An instant not after the next ``set_now`` (a live caller restoring jobs knows
        it): eligibility is judged from it until the engine has an instant."""
        self.cutoffs: list[tuple[int, int, str]] = []
        """(first instant a preference stops being eligible, seq, job id) of pending jobs
        with a deadline: :meth:`set_now` narrows their index entries then."""
        self.shares: dict[str, ShareConfig] = {
            s.name: replace(s, limits=dict(s.limits)) for s in shares
        }
        self.pools: dict[str, Pool] = {t.name: Pool(t, self.shares) for t in instance_types}
        self.plans: dict[str, Pool] = {}
        """Plan pools (:class:`scheduler.engine.plans.PlanPool`) by pool key, in the
        order the plans were added (file order)."""
        self.jobs: dict[str, Job] = {}
        self.pending: dict[str, Job] = {}
        self.index = CandidateIndex(_placeable_in(self.pools, self.shares))
        self.clock = 0
        self.version: dict[str, int] = {}
        self.now: int | None = None
        self.time_sensitive: set[str] = set()
        """Pools where a failed search depended on the victim order, which moves with
        time: they count as changed at the next instant."""
        self._facts: dict[str, PoolFacts] = {}
        self.seq = 0

    def facts(self, pool: Pool) -> PoolFacts:
        found = self._facts.get(pool.name)
        if found is None:
            found = self._facts[pool.name] = pool_facts(pool)
        return found

    def touch(
        self,
        name: str,
        only_for: str | None = None,
        eases: bool = True,
        above: int | None = None,
    ) -> None:
        """Record a change of pool ``name`` (see the class docstring); ``eases`` False:
        it can help no job fit (every proof stands); ``above``: it may help only
        ``only_for``'s jobs of a priority above that (``CandidateIndex.eased``)."""
        self.clock += 1
        self.version[name] = self.clock
        self._facts.pop(name, None)
        if eases:
            self.index.eased(name, only_for, self.clock, above)

    def set_now(self, now: int) -> None:
        """Move to instant ``now``: victim order (lost work) depends on time."""
        if now == self.now:
            return
        self.now = now
        cutoffs = self.cutoffs
        while cutoffs and cutoffs[0][0] <= now:
            job = self.pending.get(heapq.heappop(cutoffs)[2])
            if job is not None:
                blocked = constraints.blocked_at(job, now)
                if blocked != job.blocked:
                    self.index.remove(job)
                    job.blocked = blocked
                    self.index.add(job)
        for name in sorted(self.time_sensitive):
            self.touch(name)
        self.time_sensitive.clear()
        for facts in self._facts.values():
            facts.reclaim_order = None
            facts.share_order = {}
            facts.search = {}

    def pool(self, key: str) -> Pool | None:
        """The pool of a key: an instance type's name or a plan's pool key."""
        found = self.pools.get(key)
        return found if found is not None else self.plans.get(key)

    def pool_of(self, job: Job) -> Pool:
        """The pool a running job holds (or its last run held): its plan's or its type's."""
        if job.plan is not None:
            return self.plans[plan_pool(job.plan)]
        assert job.instance_type is not None
        return self.pools[job.instance_type]

    def lost_work(self, job: Job) -> Work:
        """Lost work of a running job at the current instant (victim order). A plan's
        pool has its type's speed, so the type's pool answers for runs on plans too."""
        assert job.instance_type is not None
        return lost_work_at(job, self.pools[job.instance_type].speed, self.now or 0)

    def resolve(self, name: str) -> tuple[Pool, PoolFacts, Callable[[Job], Work]] | None:
        pool = self.pools.get(name)
        if pool is None:
            pool = self.plans.get(name)
            if pool is None:
                return None
        return pool, self.facts(pool), self.lost_work

    # -- pending and running

    def add_pending(self, job: Job) -> None:
        job.state = JobState.PENDING
        self.pending[job.id] = job
        if job.deadline is not None or job.max_cost is not None:
            self._constrain(job)
        elif job.blocked or job.timeout_at is not None:
            job.blocked = job.over_budget = 0
            job.last_eligible = ()
            job.timeout_at = None
        self.index.add(job)

    def _constrain(self, job: Job) -> None:
        """Eligibility of a job's preferences for the wait that starts now
        (:mod:`scheduler.engine.constraints`); later cut-offs are queued."""
        constraints.constrain(job, self.speed_and_price, self.hour)
        # the instant the wait is judged from: eligibility only shrinks with time, so any
        # instant not after the job's first chance to run is right, and the latest known
        # spares set_now re-indexing what was already out of reach
        now = max(job.submitted_at, self.now if self.now is not None else self.hint)
        job.blocked = constraints.blocked_at(job, now)
        if job.timeout_at is not None:
            heapq.heappush(self.due, (job.timeout_at, job.seq, job.id))
        for index, at in enumerate(job.last_eligible):
            if at is not None and not job.blocked >> index & 1:
                heapq.heappush(self.cutoffs, (at + 1, job.seq, job.id))

    def speed_and_price(self, pref: Preference) -> tuple[Work, Work] | None:
        """Speed and exact hourly price of where a preference runs (None: unknown)."""
        pool = self.pools.get(pref.instance_type)
        if pool is None:
            return None
        if pref.plan is None:
            return pool.speed, exact(pool.spec.hourly_price)
        on_plan = self.plans.get(pref.pool)
        if on_plan is None:
            return None
        return pool.speed, exact(on_plan.plan.hourly_price)  # type: ignore[attr-defined]

    def reconstrain(self, job: Job) -> None:
        """Recompute a pending job's eligibility (its checkpointed work changed)."""
        if job.state is JobState.PENDING and job.id in self.pending:
            self.index.remove(job)
            self.pending.pop(job.id)
            self.add_pending(job)

    def remove_pending(self, job: Job) -> None:
        if self.pending.pop(job.id, None) is not None:
            self.index.remove(job)

    def start_running(self, job: Job) -> None:
        """Index a running job on its pool (the caller touches the pool)."""
        pool = self.pool_of(job)
        pool.add(job)
        self.index.own_changed(pool.name, job.share)

    def stop_running(self, job: Job) -> None:
        """Take a running job off its pool. The room it leaves helps every share, unless
        it stays RESERVE idle of the job's own share: then, for everyone else, free room,
        borrowers and victims are as before, and only that share may gain."""
        pool = self.pool_of(job)
        before = pool.reserve_idle
        pool.remove(job)
        self.index.own_changed(pool.name, job.share)
        kept = pool.reserve_idle - before == job.count
        self.touch(pool.name, only_for=job.share if kept else None)


class CycleStart:
    """One pool as it was when the cycle started, for tentative placements made after
    the cycle changed it: usage at once, the running jobs only when a search needs them
    (now's running jobs, less those admitted in the cycle, plus its victims)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.usage = dict(pool.usage)
        self.total = pool.total
        self.reserve_idle = pool.reserve_idle
        self.borrowers = frozenset(pool.borrowers)
        self.admitted: set[str] = set()
        self.victims: dict[str, tuple[Job, Work]] = {}
        self._light: tuple[Pool, PoolFacts] | None = None
        self._full: tuple[Pool, PoolFacts] | None = None

    def light(self, state: QueueState) -> tuple[Pool, PoolFacts]:
        if self._light is None:
            # the accounting kept at the start, not a pass over every share: a cycle
            # makes one of these per pool it changes, and most of them at a deep backlog
            pool = self.pool.empty_like(counted=False)
            pool.usage = self.usage
            pool.total = self.total
            pool.reserve_idle = self.reserve_idle
            pool.borrowers = set(self.borrowers)
            self._light = (pool, PoolFacts(self.reserve_idle, self.borrowers))
        return self._light

    def full(self, state: QueueState) -> tuple[Pool, PoolFacts, Callable[[Job], Work]]:
        if self._full is None:
            pool = self.pool.empty_like()
            for job in self.pool.jobs() + [job for job, _ in self.victims.values()]:
                if job.id not in self.admitted:
                    pool.add(job)
            self._full = (pool, pool_facts(pool))
        victims = self.victims

        def lost(job: Job) -> Work:
            found = victims.get(job.id)
            return found[1] if found is not None else state.lost_work(job)

        return self._full[0], self._full[1], lost
