"""A cycle (docs/scheduling.md): ordering, the skip rule, admission and preemption.

The rules: every pending job gets a tentative placement against the state at the cycle's
start; jobs are taken with non-borrowing tentative placements (and none) first, then
borrowing ones, each group by priority descending, submission, id; each job's choice
is made afresh; a job whose placement would now borrow although its tentative one did
not is skipped.

How it is done without looking at every pending job: only a job that fits somewhere when
its turn comes can change anything, and only a job that may stay within its limit can be
admitted in the first group. So each group walks the candidate classes
(:mod:`scheduler.engine.candidates`) merged in cycle order, and drops a class as soon as
its next job does not fit (a proof for all its later jobs) or, in the first group, could
not stay within the limit; a change that may help re-opens the classes it concerns after
the current position. A job's tentative placement is computed only when the walk reaches
it, against the pool as it was at the cycle's start (``state.CycleStart``, kept from the
pool's first change in the cycle).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable

from scheduler.engine.candidates import JobClass, Key, Pair
from scheduler.engine.model import Decision, DecisionKind, Job, JobState, Policy, Rule, Work
from scheduler.engine.placement import (
    Placement,
    choose,
    first_with_preemption,
    first_without_preemption,
    fits,
    largest_possible,
    own_possible,
)
from scheduler.engine.state import CycleStart, Pool, PoolFacts, QueueState
from scheduler.engine.work import checkpoint_at, lost_work_at, norm

LEND_AND_BORROW = Policy.LEND_AND_BORROW

UNCOUNTED_RULES = frozenset({Rule.CAPACITY_LOST, Rule.PLAN_ENDED})
"""Preemptions the job did not yield to anyone for: not counted against its retries."""

MAX_CYCLES_PER_INSTANT = 100_000
"""Safety net only: cycles at one instant stop on their own when nothing changes."""


def schedule(state: QueueState, now: int, incremental: bool = True) -> list[Decision]:
    """Cycles at ``now`` until one admits and preempts nothing (``incremental`` False:
    :func:`reference_cycle`, every pending job every cycle)."""
    state.set_now(now)
    out: list[Decision] = []
    cycle = incremental_cycle if incremental else reference_cycle
    for _ in range(MAX_CYCLES_PER_INSTANT):
        if not cycle(state, now, out):
            break
    return out


def preempt(
    state: QueueState, victim: Job, rule: str, by: str | None, now: int, out: list[Decision]
) -> None:
    """Stop a running job: it keeps its last checkpoint, loses the rest, and is requeued
    with its original submission time unless its retries are exhausted. Lost capacity
    and a plan's end are not counted against the retries (UNCOUNTED_RULES)."""
    assert victim.instance_type is not None
    speed = state.pools[victim.instance_type].speed  # a plan runs at its type's speed
    saved = checkpoint_at(victim, speed, now)
    lost = lost_work_at(victim, speed, now)
    state.stop_running(victim)
    victim.work_done = saved
    victim.last_checkpoint = saved
    victim.progress_at = now
    victim.recomputed = norm(victim.recomputed + lost)
    victim.preemptions += 1
    if rule not in UNCOUNTED_RULES:
        victim.counted_preemptions += 1
    out.append(
        Decision(
            DecisionKind.PREEMPTED,
            victim.id,
            now,
            instance_type=victim.instance_type,
            count=victim.count,
            rule=rule,
            by=by,
            lost_work=lost,
            plan=victim.plan,
        )
    )
    retries = state.shares[victim.share].preemption_retries
    if retries is not None and victim.counted_preemptions > retries:
        victim.state = JobState.FAILED
        victim.finished_at = now
        out.append(Decision(DecisionKind.FAILED, victim.id, now, rule=Rule.RETRIES_EXHAUSTED))
    else:
        state.add_pending(victim)


def admit(state: QueueState, job: Job, placement: Placement, now: int, out: list[Decision]) -> None:
    """Stop the placement's victims (their ``preempted`` first), then start the job."""
    name = placement.instance_type
    for victim, rule in placement.victims:
        preempt(state, victim, rule, job.id, now, out)
    state.remove_pending(job)
    job.state = JobState.RUNNING
    job.instance_type = name
    job.plan = placement.plan
    job.count = placement.count
    job.preference = placement.preference
    job.borrowed = placement.borrowed
    if job.started_at is None:
        job.started_at = now
    job.run_started_at = now
    job.progress_at = now
    job.run_overhead = job.restart_overhead if job.preemptions else 0
    state.start_running(job)
    key = placement.pool or name
    if placement.plan is not None:
        # only the plan's share runs there: it gains a possible in-share victim, if any
        in_share = state.shares[job.share].in_share_preemption
        state.touch(key, only_for=job.share, eases=in_share, above=job.priority)
    elif state.pools[name].usage[job.share] > state.shares[job.share].limits.get(name, 0):
        state.touch(name)  # a new borrower: more to reclaim for everyone
    else:
        # within its limit: every other share only sees usage grow (less room, the same
        # borrowers), so nothing proven for them changes; its own share gains a possible
        # in-share victim, if it preempts in-share at all, for its jobs of a higher
        # priority only
        in_share = state.shares[job.share].in_share_preemption
        state.touch(name, only_for=job.share, eases=in_share, above=job.priority)
    out.append(
        Decision(
            DecisionKind.ADMITTED,
            job.id,
            now,
            instance_type=name,
            count=placement.count,
            preference=placement.preference,
            borrowed=placement.borrowed,
            rule=Rule.BORROW if placement.borrowed else Rule.OWN,
            plan=placement.plan,
        )
    )


def incremental_cycle(state: QueueState, now: int, out: list[Decision]) -> bool:
    """One cycle, walking only the candidate classes (see the module docstring); True
    when it admitted or preempted anything."""
    if not state.index.maybe_live:
        return False  # every class is proven not to fit: nothing to walk
    return _Cycle(state, now, out).run()


def reference_cycle(state: QueueState, now: int, out: list[Decision]) -> bool:
    """The cycle of docs/scheduling.md written as it reads, over every pending job: what
    ``Engine(incremental=False)`` runs, so tests can hold the walk to it."""
    resolve = state.resolve
    tentative = {
        job.id: choose(state.shares, job, resolve, state.time_sensitive)
        for job in state.pending.values()
    }

    def borrows(job: Job) -> bool:
        found = tentative[job.id]
        return found is not None and found.borrowed > 0

    order = sorted(
        state.pending.values(),
        key=lambda j: (1 if borrows(j) else 0, -j.priority, j.submitted_at, j.id),
    )
    changed = False
    stamp = state.clock
    for job in order:
        if job.state is not JobState.PENDING:
            continue  # admitted, or preempted again after it: the next cycle decides
        if any(state.version.get(p.pool, 0) > stamp for p in job.preferences):
            placement = choose(state.shares, job, resolve, state.time_sensitive)
        else:
            placement = tentative[job.id]  # its types are as they were: the same choice
        if placement is None or (placement.borrowed > 0 and not borrows(job)):
            continue
        admit(state, job, placement, now, out)
        changed = True
    return changed


class _Cycle:
    """One cycle's walk (see the module docstring)."""

    def __init__(self, state: QueueState, now: int, out: list[Decision]) -> None:
        self.state = state
        self.now = now
        self.out = out
        self.starts: dict[str, CycleStart] = {}
        self.borrows: dict[str, bool] = {}
        """Job id -> does its tentative placement borrow (computed when first reached)."""
        self.done: set[str] = set()
        """Jobs whose turn in this cycle is over, or victims (they wait for the next)."""
        self.unresolved: set[Pair] = set()
        """Pairs of jobs that could run but were not admitted: the next cycle looks again."""
        self.walked: dict[int, JobClass] = {}
        self.heap: list[tuple[Key, int, JobClass, int]] = []
        """(key, seq, class, where the key was in the class when queued)."""
        self.token = object()
        """Marks the classes queued in the current group (``JobClass.mark``)."""
        self.position: Key | None = None
        self.seq = 0
        self.changed = False
        self.second = False
        """Whether the second group may act: a job waits for it, a class of a
        LEND_AND_BORROW share was left out of the first group or changed."""
        self.reopened: set[Pair] = set()
        """Pairs changed during the first group (its second walks those that may borrow
        from their first job; the next cycle looks at the others)."""

    def run(self) -> bool:
        index = self.state.index
        for pair in index.take_maybe_live():
            for cls in self._open_classes(pair, first_group=True):
                self.walked[id(cls)] = cls
        if not self.walked:
            return False
        index.log = []
        index.log_above = []
        second_ran = False
        try:
            index.walk_covers = True
            self._start_group(list(self.walked.values()), checked=True)
            self._walk(0)
            index.walk_covers = False
            if self.second:
                # only jobs of LEND_AND_BORROW shares can have borrowing tentatives
                second_ran = True
                self._start_group([c for c in self.walked.values() if self._borrows(c.share)])
                self._walk(1)
        finally:
            index.log = index.log_above = None
            index.walk_covers = False
        for pair in self.reopened:
            if not (second_ran and self._borrows(pair[1])):
                index.maybe_live.add(pair)  # changed after its jobs' turns: look again
        index.maybe_live |= self.unresolved
        return self.changed

    def _borrows(self, share: str) -> bool:
        return self.state.shares[share].policy is Policy.LEND_AND_BORROW

    def _within_limit(
        self, pair: Pair, classes: list[JobClass], after: Key | None
    ) -> list[JobClass]:
        """Of classes about to be queued for the first group from their first job after
        ``after`` (None: from their first), those that may be admitted in it.

        Only for a share that cannot borrow: its jobs can only be admitted in the first
        group, and only within its limit (``own_possible``, monotone: a later job of the
        class, at no higher priority, fails too). Nothing that could change that before
        the job's turn (a victim of the share on the type, a new limit) comes without
        easing the pair, which queues the class again. Deep backlogs have many such
        classes: every change of a type wakes every share's classes there, and most of
        those shares are at their limit. The classes left out are not proven on the
        pair's frontier: this test rules them out again, sooner, every time they are
        opened for the first group, and the first change that could help them eases the
        pair, which makes such a proof void anyway."""
        state = self.state
        pool = state.pools.get(pair[0])
        if not classes or pool is None:
            return classes  # a plan's pool: it never borrows
        share = pair[1]
        cfg = state.shares[share]
        if cfg.policy is Policy.LEND_AND_BORROW:
            return classes  # a share that may borrow
        lim = cfg.limits.get(pool.name)
        if lim is None:
            return []  # no limit on the type: nothing within it
        in_share = cfg.in_share_preemption
        index = state.index
        stamp = (lim, in_share, pool.marks.get(share, 0))
        if index.own_blocked.get(pair) == stamp:
            # nothing the test depends on changed since no class could pass it from its
            # first job: none can now, from its first job or a later one
            return []
        # own_possible's test, with what depends on the pair alone taken out of the loop
        room = lim - pool.usage.get(share, 0)
        if after is None and classes[-1].count <= room:
            return classes  # counts ascend: every class fits within the room
        prios = pool.prios.get(share) if in_share else None
        found = []
        for cls in classes:
            count = cls.count
            keys = cls.keys
            if after is not None and (not keys or keys[-1] <= after):
                continue  # nothing after the position: queueing it would do nothing
            if count <= room:
                found.append(cls)  # whatever its first job after the position
            elif prios:
                # the test is monotone in the priority: when the class's first job (its
                # highest) fails it, so does every job after the position, which is then
                # not looked for (at a deep backlog most classes fail here)
                held = pool.counts[share]
                below = bisect_left(prios, cls.jobs[0].priority)
                if not below or count > room + sum(held[:below]):
                    continue
                if after is not None:
                    nxt = cls.jobs[cls.index_from(after, inclusive=False)]
                    below = bisect_left(prios, nxt.priority)
                    if not below or count > room + sum(held[:below]):
                        continue
                found.append(cls)
            else:
                break  # no victims of its own: counts ascend, no later class fits either
        if not found and after is None:
            # other shares' changes need not wake the pair until this state changes: at a
            # deep backlog most shares sit at their limit while the others come and go
            index.own_blocked[pair] = stamp
        return found

    def _start_group(self, classes: list[JobClass], checked: bool = False) -> None:
        """Queue the classes from their first job (``checked``: just opened, so their
        first job is known not to be proven failing)."""
        index = self.state.index
        self.heap = heap = []
        self.token = token = object()
        self.position = None
        for cls in classes:
            if not cls.jobs:
                continue
            first = cls.jobs[0].priority
            if checked or not index.covered((cls.pool, cls.share), cls.count, first, cls.own_only):
                self.seq += 1
                heap.append((cls.keys[0], self.seq, cls, 0))
                cls.mark = token
        heapq.heapify(heap)

    def _open_classes(
        self, pair: Pair, first_group: bool = False, after: Key | None = None
    ) -> list[JobClass]:
        """The pair's classes whose first job may fit: asking no more than the share
        could place at all, and not yet proven not to fit; for the first group
        (``first_group``, queued from their first job after ``after``), and a share that
        cannot borrow, only those that may stay within its limit (:meth:`_within_limit`,
        asked first: it is cheaper than the share's largest possible count, and at a
        deep backlog it often rules out every class of the pair)."""
        state = self.state
        pool = state.pools.get(pair[0])
        if pool is None:
            pool = state.plans.get(pair[0])
            if pool is None:
                return []  # an unknown type (or plan): nothing ever fits there
        elif pair[0] not in state.shares[pair[1]].limits:
            # no limit on the type: the share can place nothing there (largest_possible
            # is -1). Many pairs are such (preferences beyond the share's types), and every
            # change of the type wakes them: answer before computing the pool's facts
            return []
        classes = state.index.classes_of(pair)
        if first_group:
            classes = self._within_limit(pair, classes, after)
        if not classes:
            return []
        facts = state.facts(pool)
        largest = facts.largest.get(pair[1])
        if largest is None:
            largest = largest_possible(state.shares, pool, facts, pair[1])
        if classes[0].count > largest:
            return []
        frontier = state.index.frontier(pair)
        found = []
        for cls in classes:
            if cls.count > largest:
                break
            if frontier is None or not frontier.covers(
                cls.count, cls.jobs[0].priority, cls.own_only
            ):
                found.append(cls)
        return found

    def _push(self, cls: JobClass, after: Key | None) -> None:
        """Queue the class from its first job after ``after`` (None: from its first)."""
        self._push_at(cls, cls.index_from(after, inclusive=after is None))

    def _push_at(self, cls: JobClass, index: int) -> None:
        if cls.mark is self.token:
            return  # already queued at its first job after the position
        if index < len(cls.keys):
            self.seq += 1
            heapq.heappush(self.heap, (cls.keys[index], self.seq, cls, index))
            cls.mark = self.token

    def _walk(self, group: int) -> None:
        """Take the queued classes' jobs in cycle order (the hot loop: kept flat)."""
        state = self.state
        index = state.index
        shares = state.shares
        pools = state.pools
        plans = state.plans
        heap = self.heap
        done = self.done
        deferred = self.borrows if group == 0 else {}
        pop = heapq.heappop
        frontiers = index.frontiers
        eased_all = index.eased_all
        eased_for = index.eased_for
        while heap:
            key, _, cls, at = pop(heap)
            cls.mark = None
            jobs = cls.jobs
            keys = cls.keys
            end = len(jobs)
            # keys are unique, so the key found where it was queued is where it is now
            # (or one before, its class's job just admitted): no bisection then
            if not (at < end and keys[at] is key):
                if 0 < at <= end and keys[at - 1] is key:
                    at -= 1
                else:
                    at = bisect_left(keys, key)
            while at < end and (jobs[at].id in done or deferred.get(jobs[at].id, False)):
                at += 1  # its turn is over, or (first group) it waits for the second
            if at >= end:
                continue
            if keys[at] != key:
                self._push_at(cls, at)  # its next job comes later: keep the merge order
                continue
            job = jobs[at]
            share = cls.share
            name = cls.pool
            pool = pools.get(name) or plans[name]
            pair = (name, share)
            priority = job.priority
            count = cls.count
            borrows = shares[share].policy is LEND_AND_BORROW
            # a proof about jobs that may not borrow holds for the others only where the
            # share cannot borrow anyway
            own_proof = cls.own_only and borrows
            if group == 0 and not own_possible(shares, pool, share, count, priority):
                if borrows and not cls.own_only:
                    self.second = True  # it may still borrow, in the second group
                else:  # nor borrow
                    index.prove(pair, count, priority, state.clock, own_proof)
                continue  # no job of the class can be admitted in this group now
            frontier = frontiers.get(pair)  # index.frontier(pair), written out
            if (
                frontier is not None
                and frontier.since >= eased_all.get(name, 0)
                and frontier.since >= eased_for.get(pair, 0)
                and frontier.covers(count, priority, cls.own_only)
            ):
                continue
            facts = state.facts(pool)
            room = facts.maxfit.get(share)
            if room is not None and count <= room and not cls.own_only:
                pass  # fits without preemption (the first test of ``fits``)
            elif not fits(
                shares,
                pool,
                facts,
                state.lost_work,
                share,
                count,
                priority,
                state.time_sensitive,
                cls.own_only,
            ):
                index.prove(pair, count, priority, state.clock, own_proof)
                continue
            self._push_at(cls, at + 1)
            self.position = key
            self._visit(job, group)

    def _visit(self, job: Job, group: int) -> None:
        """A job that fits somewhere now, at its turn in ``group`` (or reached in the
        first group while its tentative placement borrows: then it waits for the second)."""
        state = self.state
        placement: Placement | None = None
        if job.id not in self.borrows:
            placement = self._tentative(job)
        if group == 0 and self.borrows[job.id]:
            self.second = True
            return
        if group == 1 and not self.borrows[job.id]:
            self._leave(job)  # its turn was in the first group
            return
        if placement is None:
            placement = choose(state.shares, job, state.resolve, state.time_sensitive)
        if placement is None:  # pragma: no cover - it was found to fit just now
            raise AssertionError(f"job {job.id!r} fits but has no placement")
        if group == 0 and placement.borrowed > 0:
            self._leave(job)  # the skip rule: it may borrow in the next cycle
            return
        self._admit(job, placement)

    def _leave(self, job: Job) -> None:
        self.done.add(job.id)
        for pref in job.preferences:
            self.unresolved.add((pref.pool, job.share))

    def _tentative(self, job: Job) -> Placement | None:
        """Record whether the job's tentative placement borrows; return its placement
        now when that is the same (none of its pools changed in this cycle)."""
        state = self.state
        starts = self.starts
        changed = False
        if starts:
            for pref in job.preferences:  # a loop, not any() over a generator: per visit
                if pref.pool in starts:
                    changed = True
                    break
        if not changed:
            placement = choose(state.shares, job, state.resolve, state.time_sensitive)
            self.borrows[job.id] = placement is not None and placement.borrowed > 0
            return placement

        def light(name: str) -> tuple[Pool, PoolFacts, Callable[[Job], Work]] | None:
            start = starts.get(name)
            if start is None:
                return state.resolve(name)
            return (*start.light(state), state.lost_work)

        def full(name: str) -> tuple[Pool, PoolFacts, Callable[[Job], Work]] | None:
            start = starts.get(name)
            return state.resolve(name) if start is None else start.full(state)

        tentative = first_without_preemption(state.shares, job, light)
        cfg = state.shares[job.share]
        if (
            tentative is None
            and cfg.policy is Policy.LEND_AND_BORROW
            and cfg.in_share_preemption
            and job.may_borrow
        ):
            # only in-share victims of a LEND_AND_BORROW share make a borrowing placement
            # (and only for a job that may borrow)
            tentative = first_with_preemption(state.shares, job, full, state.time_sensitive)
        self.borrows[job.id] = tentative is not None and tentative.borrowed > 0
        return None

    def _admit(self, job: Job, placement: Placement) -> None:
        """Admit, keeping the pool's state at the cycle's start for later tentatives."""
        state = self.state
        name = placement.pool or placement.instance_type
        start = self.starts.get(name)
        if start is None:
            pool = state.pool(name)
            assert pool is not None
            start = self.starts[name] = CycleStart(pool)
        for victim, _ in placement.victims:
            start.victims[victim.id] = (victim, state.lost_work(victim))
            self.done.add(victim.id)
        admit(state, job, placement, self.now, self.out)
        start.admitted.add(job.id)
        self.changed = True
        self.done.add(job.id)
        self._reopen()

    def _reopen(self) -> None:
        """Queue again, after the current position, the classes a change may have
        helped (they were dropped when their next job did not fit)."""
        index = self.state.index
        assert index.log is not None and index.log_above is not None
        pairs = set(index.log)
        index.log.clear()
        if index.log_above:
            # eased for jobs above the admitted job's priority only: past the position
            # (no higher priority), a walk has nothing to gain there. Only the second
            # group may still take such jobs of a share that may borrow, this cycle
            for pair in index.log_above:
                if pair in pairs:
                    continue
                if index.walk_covers and self._borrows(pair[1]):
                    pairs.add(pair)  # as any change: walked again from the first job
                elif index.walk_covers:
                    self.reopened.add(pair)  # the next cycle looks at it again
            index.log_above.clear()
        if index.walk_covers:
            self.reopened |= pairs
            self.second = self.second or any(self._borrows(pair[1]) for pair in pairs)
        for pair in pairs:
            for cls in self._open_classes(pair, index.walk_covers, self.position):
                self.walked.setdefault(id(cls), cls)
                self._push(cls, self.position)
