"""The incremental index: which pending jobs a cycle must look at, and what it may skip.

Pending jobs are kept in **classes**: one per (pool, share, count, own only), holding
the jobs of the share whose smallest count on that pool, over the preferences eligible
now (``Job.blocked``), is ``count``, sorted the way a cycle takes them (priority
descending, then submission, then id). Jobs that may not borrow (``may_borrow`` false)
are classes of their own: for them the share counts as one that cannot borrow, so a
proof about them says nothing about the others (the converse holds: what fails with
borrowing allowed fails without it). Whether a job of share S asking
``n`` of pool T fits there, with or without preemption, depends only on T's state, S, n
and the job's priority, and it is monotone: a smaller count or a higher priority never
turns a fit into a failure. So one job that does not fit proves that every job of its
share asking at least as much at no higher priority does not fit either.

That proof is a :class:`Frontier` per (pool, share). It stays valid until the pool
changes in the share's favour: ``eased(pool, share)`` records such changes (any change
may help every share, except an admission that leaves its share within its limit: for
everyone else it only adds usage). A (pool, share) pair is **maybe live** while some job
of it is not covered by a valid frontier; a cycle starts from those pairs only, so its
cost follows what changed, not how many jobs wait.

A second proof holds for a share that cannot borrow: when none of its classes on a pool
could be placed within its limit, that stays so until its own limit or running jobs
there change or a job joins (``own_blocked``), so changes of other shares, which void
the frontier, do not wake the pair.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.engine.model import Job

Key = tuple[int, int, str]
"""A pending job's place in a cycle (within its group): (-priority, submitted_at, id)."""

FAR = 1 << 62
"""A priority above any other: a frontier at FAR rules out every priority."""


_RANKS: dict[int, int] = {}
"""One int object per negated priority, shared by every key that has it (see
:class:`JobClass`); bounded by ``_MAX_RANKS`` (beyond it a key keeps its own, which is
only slower)."""

_MAX_RANKS = 1 << 16


def cycle_key(job: Job) -> Key:
    rank = -job.priority
    shared = _RANKS.get(rank)
    if shared is None:
        if len(_RANKS) >= _MAX_RANKS:
            return (rank, job.submitted_at, job.id)
        shared = _RANKS[rank] = rank
    return (shared, job.submitted_at, job.id)


def smallest_counts(job: Job) -> dict[str, int]:
    """Per pool of a job's eligible preferences (a type, or a plan), the smallest count
    it asks there: the job may fit on the pool exactly when that count may (a fit is
    monotone in the count)."""
    counts: dict[str, int] = {}
    blocked = job.blocked
    for index, pref in enumerate(job.preferences):
        if blocked and blocked >> index & 1:
            continue
        old = counts.get(pref.pool)
        if old is None or pref.count < old:
            counts[pref.pool] = pref.count
    return counts


class JobClass:
    """Pending jobs of one share whose smallest count on one pool is ``count``, in cycle
    order (``keys[i]`` is ``cycle_key(jobs[i])``); ``own_only``: jobs that may not
    borrow.

    ``ranks[i]`` is ``keys[i][0]`` (the negated priority), kept alongside so that a job
    is found by bisecting ints first and its keys only among the jobs of its priority
    (after trying its first and last place there: a submission usually comes last
    among them, an admission usually takes the first).
    At a deep backlog the keys are scattered over memory and each comparison of two
    tuples reads several objects; the ranks are a handful of shared ints
    (``cycle_key``), so the bisection that every submission, admission and requeue makes
    in each of the job's classes costs a fraction of the plain one, with the same
    answer (keys are ordered by rank first)."""

    __slots__ = ("count", "jobs", "keys", "mark", "own_only", "pool", "ranks", "share")

    def __init__(self, pool: str, share: str, count: int, own_only: bool = False) -> None:
        self.pool = pool
        self.share = share
        self.count = count
        self.own_only = own_only
        self.keys: list[Key] = []
        self.jobs: list[Job] = []
        self.ranks: list[int] = []
        self.mark: object = None
        """Set by a cycle while the class is queued in its walk."""

    def _left(self, key: Key) -> int:
        """``bisect_left(self.keys, key)``, bisecting the ranks first."""
        ranks = self.ranks
        rank = key[0]
        lo = bisect_left(ranks, rank)
        if lo == len(ranks) or ranks[lo] != rank:
            return lo  # no job of that priority: every key before is less, every after more
        keys = self.keys
        if key <= keys[lo]:
            return lo  # first of its priority: most admissions take such a job
        hi = bisect_right(ranks, rank, lo)
        if keys[hi - 1] < key:
            return hi  # last of its priority: most submissions come last
        return bisect_left(keys, key, lo + 1, hi - 1)

    def add(self, job: Job, key: Key) -> int:
        """Insert the job in cycle order; its position (0: first of the class)."""
        index = self._left(key)
        self.keys.insert(index, key)
        self.jobs.insert(index, job)
        self.ranks.insert(index, key[0])
        return index

    def discard(self, key: Key) -> None:
        index = self._left(key)
        if index < len(self.keys) and self.keys[index] == key:
            del self.keys[index]
            del self.jobs[index]
            del self.ranks[index]

    def index_from(self, key: Key | None, inclusive: bool = True) -> int:
        """Position of the first job at or (``inclusive`` False) after ``key``."""
        if key is None:
            return 0
        if inclusive:
            return self._left(key)
        ranks = self.ranks
        rank = key[0]
        hi = bisect_right(ranks, rank)
        if not hi or ranks[hi - 1] != rank:
            return hi  # no job of that priority
        return bisect_right(self.keys, key, bisect_left(ranks, rank, 0, hi), hi)


@dataclass(slots=True)
class Frontier:
    """Jobs of one share on one pool asking at least ``count`` with priority at most
    ``by_count[count]`` fit nowhere on the pool, as of clock ``since``; ``own_by_count``
    the same for jobs that may not borrow only."""

    since: int
    by_count: dict[int, int] = field(default_factory=dict)
    own_by_count: dict[int, int] = field(default_factory=dict)

    def clip(self, priority: int) -> None:
        """Keep the proofs for priorities up to ``priority`` only (the pool changed in
        favour of the share's jobs above it alone)."""
        for by_count in (self.by_count, self.own_by_count):
            for n, p in by_count.items():
                if p > priority:
                    by_count[n] = priority

    def covers(self, count: int, priority: int, own_only: bool = False) -> bool:
        # plain loops, not any() over a generator: this is asked for every class a
        # cycle opens or pops, and a generator's set-up costs more than its few items
        for n, p in self.by_count.items():
            if n <= count and p >= priority:
                return True
        if own_only:
            for n, p in self.own_by_count.items():
                if n <= count and p >= priority:
                    return True
        return False


Pair = tuple[str, str]
"""(pool, share)."""

OwnStamp = tuple[int | None, bool, int]
"""What decides, besides the pair's pending jobs, whether a share's jobs on a pool could
be placed within its limit (``placement.own_possible``): its limit there, its in-share
preemption and the stamp of its running jobs there (``Pool.marks``). Other shares'
changes leave it as it was; a job leaving a class cannot make the first job of the
class more placeable (the one behind it asks as much at no higher priority)."""


class CandidateIndex:
    """Classes of pending jobs, frontiers, and the clocks of changes that may help."""

    def __init__(self, placeable: Callable[[str, str], bool] | None = None) -> None:
        self.placeable = placeable
        """(pool, share) -> may the share place anything on the pool at all (False: a
        type it has no limit for); None: every pair may."""
        self.entries: dict[str, tuple[Key, bool, dict[str, int]]] = {}
        """Per indexed job id: its key, whether it may not borrow, and its classes' pools
        and counts (what :meth:`remove` undoes, without working them out again)."""
        self.classes: dict[Pair, dict[tuple[int, bool], JobClass]] = {}
        self._sorted: dict[Pair, list[JobClass]] = {}
        self.shares_on: dict[str, set[str]] = {}
        self.woken_on: dict[str, set[str]] = {}
        """Of ``shares_on``, the shares with pending jobs there that may place anything
        on the pool: the only ones a change of the pool wakes. At a deep, varied
        backlog about half the pairs are of preferences beyond their share's types,
        and many others have no pending job left; every change of the type would
        otherwise queue them for a cycle that rules them out one by one."""
        self.frontiers: dict[Pair, Frontier] = {}
        self.eased_all: dict[str, int] = {}
        self.eased_for: dict[Pair, int] = {}
        self.maybe_live: set[Pair] = set()
        self.own_blocked: dict[Pair, OwnStamp] = {}
        """Pairs of shares that cannot borrow, none of whose jobs could be placed within
        the share's limit, and the state that was proven in (:data:`OwnStamp`). Such a
        pair can admit nothing until that state changes, whatever other shares do, so
        :meth:`eased` does not wake it; it leaves as soon as its share's running jobs
        on the pool change (:meth:`own_changed`), a job joins it (:meth:`add`) or its
        share's configuration changes (:meth:`share_changed`)."""
        self.log: list[Pair] | None = None
        """While a cycle runs: every pair eased, for it to look at them again."""
        self.log_above: list[Pair] | None = None
        """While a cycle runs: pairs eased only above a priority (:meth:`eased`)."""
        self.walk_covers = False
        """True while a cycle's first group runs: its second group walks every pair
        eased meanwhile from its first job, so the next cycle need not."""

    # -- membership

    def add(self, job: Job) -> None:
        """Index a pending job. Behind the first job of its class, it changes nothing a
        proof rests on: every test that rules out the first job (a frontier,
        ``own_possible``, the largest possible count) is monotone and rules out one
        asking as much at no higher priority. So only a job that comes first in its
        class unblocks its pair (``own_blocked``), and, between cycles, only such a job
        makes its pair maybe live; during one (a victim waiting again) every job does,
        since the first job of its class may be admitted or left in that cycle.
        A deep backlog takes most submissions behind the first job of their class."""
        key = cycle_key(job)
        own = not job.may_borrow
        blocked = self.own_blocked
        in_cycle = self.log is not None
        counts = smallest_counts(job)
        self.entries[job.id] = (key, own, counts)
        for pool, count in counts.items():
            pair = (pool, job.share)
            by_count = self.classes.get(pair)
            if by_count is None:
                by_count = self.classes[pair] = {}
                self.shares_on.setdefault(pool, set()).add(job.share)
                self.woken_on.setdefault(pool, set())
            if not by_count and (self.placeable is None or self.placeable(pool, job.share)):
                self.woken_on[pool].add(job.share)  # its first pending job there
            cls = by_count.get((count, own))
            if cls is None:
                cls = by_count[(count, own)] = JobClass(pool, job.share, count, own)
                self._sorted.pop(pair, None)
            first = cls.add(job, key) == 0
            if first and blocked:
                blocked.pop(pair, None)
            if (first or in_cycle) and job.share in self.woken_on[pool]:
                self.maybe_live.add(pair)

    def remove(self, job: Job) -> None:
        """Take a job out of the classes :meth:`add` put it in."""
        entry = self.entries.pop(job.id, None)
        if entry is None:
            entry = (cycle_key(job), not job.may_borrow, smallest_counts(job))
        key, own, counts = entry
        for pool, count in counts.items():
            pair = (pool, job.share)
            by_count = self.classes[pair]
            cls = by_count[(count, own)]
            cls.discard(key)
            if not cls.jobs:
                del by_count[(count, own)]
                self._sorted.pop(pair, None)
                if not by_count:
                    # no pending job of the share left there: nothing for a change of
                    # the pool to wake until one comes (add)
                    self.woken_on[pool].discard(job.share)

    def classes_of(self, pair: Pair) -> list[JobClass]:
        """The pair's classes, smallest count first."""
        found = self._sorted.get(pair)
        if found is None:
            by_count = self.classes.get(pair, {})
            found = self._sorted[pair] = [by_count[n] for n in sorted(by_count)]
        return found

    # -- changes and proofs

    def eased(self, pool: str, only_for: str | None, clock: int, above: int | None = None) -> None:
        """Pool ``pool`` changed at ``clock`` in a way that may help every share's jobs
        there (``only_for`` None) or only that share's; ``above`` (with ``only_for``):
        only its jobs of a priority above that.

        ``above`` is a new running job of the share within its limit: a possible
        in-share victim of its jobs of a higher priority only, and one more job holding
        instances for the others. The pair's proofs then still hold up to that priority
        (:meth:`Frontier.clip`), and the pair goes to ``log_above``, not ``log``: a walk
        that just admitted that job is past every job of a higher priority."""
        blocked = self.own_blocked
        if above is not None and only_for is not None:
            pair = (pool, only_for)
            frontier = self.frontiers.get(pair)
            if frontier is not None and frontier.since >= self.eased_at(pair):
                frontier.clip(above)
            if only_for in self.woken_on.get(pool, ()) and pair not in blocked:
                if not self.walk_covers:
                    self.maybe_live.add(pair)
                if self.log_above is not None:
                    self.log_above.append(pair)
            return
        if only_for is None:
            self.eased_all[pool] = clock
            pairs = [
                pair
                for pair in [(pool, share) for share in self.woken_on.get(pool, ())]
                if pair not in blocked
            ]
        else:
            self.eased_for[(pool, only_for)] = clock
            pair = (pool, only_for)
            woken = only_for in self.woken_on.get(pool, ())
            pairs = [pair] if woken and pair not in blocked else []
        if not self.walk_covers:
            self.maybe_live.update(pairs)
        if self.log is not None:
            self.log.extend(pairs)

    def own_changed(self, pool: str, share: str) -> None:
        """The share's running jobs on the pool changed: what it could place within its
        limit there must be judged again."""
        if self.own_blocked:
            self.own_blocked.pop((pool, share), None)

    def share_changed(self, share: str) -> None:
        """The share's configuration changed (limits, policy, in-share preemption)."""
        for pair in [pair for pair in self.own_blocked if pair[1] == share]:
            del self.own_blocked[pair]
        for pool, on in self.shares_on.items():
            if share in on:
                placeable = self.placeable is None or self.placeable(pool, share)
                if placeable and self.classes.get((pool, share)):
                    self.woken_on[pool].add(share)
                else:
                    self.woken_on[pool].discard(share)

    def eased_at(self, pair: Pair) -> int:
        every = self.eased_all.get(pair[0], 0)
        mine = self.eased_for.get(pair, 0)
        return every if every > mine else mine  # max() costs a call: this is hot

    def frontier(self, pair: Pair) -> Frontier | None:
        """The pair's frontier if it is still valid."""
        frontier = self.frontiers.get(pair)
        if frontier is None or frontier.since < self.eased_at(pair):
            return None
        return frontier

    def covered(self, pair: Pair, count: int, priority: int, own_only: bool = False) -> bool:
        """Is a job of the pair asking ``count`` at ``priority`` proven not to fit?"""
        frontier = self.frontiers.get(pair)
        if frontier is None or frontier.since < self.eased_at(pair):
            return False
        return frontier.covers(count, priority, own_only)

    def prove(
        self, pair: Pair, count: int, priority: int, clock: int, own_only: bool = False
    ) -> None:
        """Record that a job asking ``count`` at ``priority`` does not fit at ``clock``
        (``own_only``: a job that may not borrow, which proves nothing for the others)."""
        frontier = self.frontiers.get(pair)
        if frontier is None or frontier.since < self.eased_at(pair):
            frontier = self.frontiers[pair] = Frontier(clock)
        by_count = frontier.own_by_count if own_only else frontier.by_count
        if by_count.get(count, -FAR) < priority:
            by_count[count] = priority

    def take_maybe_live(self) -> list[Pair]:
        pairs = list(self.maybe_live)
        self.maybe_live = set()
        return pairs
