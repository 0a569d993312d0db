"""The scheduling engine of one job queue (DESIGN section 2).

One :class:`Engine` holds a queue's instance types, shares and jobs and applies every
rule: accounting, fits, victim search, cycles, preemption, lost capacity, timeouts and
the reasons a job waits. The live scheduler and the scenario runner both drive this one
object, so no rule exists twice.

Speed without changing the outcome
----------------------------------
A cycle must give exactly what the rules define, but re-examining every pending job at
every instant would be far too slow for big queues. The engine keeps an invariant
instead: *at the start of a cycle every pending job that is not in ``_dirty_jobs`` and
has no preference on a type in ``_dirty_types`` fits nowhere, with or without
preemption, in the current state*. Whether a job fits on type ``T`` depends only on the
state of ``T`` (usage, capacity, running jobs), the share configurations, the job's own
count and priority, and, for the order of reclaim victims, on ``now``. So each event
marks what it touched: a completion or admission dirties its type, a new or
re-prioritised job dirties itself, a share change dirties the types of its limits.

A cycle then examines only (``_collect``):

* dirty jobs that pass an exact necessary bound (``_may_fit`` / ``_threshold``: room
  without preemption, plus at most what reclaim and lower-priority own jobs could free,
  and whether an own or borrowing placement is then possible at all);
* on dirty types, pending jobs indexed per (type, share, smallest count) whose count
  group passes the same bound (groups are visited smallest count first and the walk
  stops at the first group that cannot fit: the bound is monotone), skipping jobs
  already found to fit nowhere (``_failed_at``) since the last change of ``T`` that
  could help them (``_eased``/``_eased_for``). An admission that leaves its share not
  borrowing only adds usage on ``T`` for every other share (less room, the same
  borrowers and reclaim victims), so it can help only its own share's jobs (new in-share
  victim); everything else (completions, preemptions, capacity, share and priority
  changes, new borrowers, time for time-sensitive searches) may help anyone. Shares
  with nothing in their favour since the previous collection are skipped wholesale.

Jobs nobody touched keep failing and are treated exactly as the rules treat a job with
no placement. Derived values per type (free, room, bounds, victim order, search
results) are cached until the type changes; running jobs' priorities are kept sorted
per (type, share) so in-share bounds cost a bisection. ``incremental=False`` turns all
of this off (every pending job every cycle) and the tests insist both agree.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction

from scheduler.engine import accounting
from scheduler.engine import work as work_rules
from scheduler.engine.model import (
    FINAL_STATES,
    Decision,
    InstanceType,
    Job,
    JobState,
    Policy,
    Reason,
    ShareConfig,
    Work,
    exact,
)

MAX_CYCLES_PER_INSTANT = 100_000
"""Safety net only: cycles at one instant stop on their own when nothing changes."""

_SHARE_FIELDS = frozenset(
    {"policy", "borrow_limit", "limits", "in_share_preemption", "preemption_retries"}
)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where and how a pending job would run, and whom it would stop for it."""

    preference: int
    instance_type: str
    count: int
    borrowed: int
    victims: tuple[tuple[Job, str], ...] = ()
    """(victim, rule) in pick order; rule is ``reclaim`` or ``priority``."""


@dataclass(frozen=True, slots=True)
class ShareUsage:
    """Accounting of one share on one type (DESIGN section 2), for pages and API."""

    share: str
    instance_type: str
    limit: int
    usage: int
    own: int
    borrowed: int
    idle: int
    free: int


class _Type:
    """Mutable state of one instance type in the queue."""

    __slots__ = (
        "accelerated",
        "capacity",
        "lower_counts",
        "lower_prios",
        "name",
        "running",
        "spec",
        "speed",
        "total",
        "usage",
    )

    def __init__(self, spec: InstanceType) -> None:
        self.spec = spec
        self.name = spec.name
        self.capacity = spec.capacity
        self.speed: Work = exact(spec.speed)
        self.accelerated = spec.is_accelerated
        self.usage: dict[str, int] = {}
        self.total = 0
        self.running: dict[str, dict[str, Job]] = {}
        # per share: priorities of its running jobs ascending, and their counts alongside
        self.lower_prios: dict[str, list[int]] = {}
        self.lower_counts: dict[str, list[int]] = {}


class _TypeCache:
    """Values derived from one type's state; dropped whenever that type changes."""

    __slots__ = (
        "biggest",
        "borrowers",
        "bound",
        "by_share",
        "maxfit",
        "ordered",
        "reserve_idle",
        "search",
    )

    def __init__(self, reserve_idle: int, borrowers: frozenset[str]) -> None:
        self.reserve_idle = reserve_idle
        self.borrowers = borrowers
        self.maxfit: dict[str, int] = {}
        # share -> bound figures, see ``Engine._bound``
        self.bound: dict[str, tuple[int, int, int, bool, int, int]] = {}
        self.biggest: dict[str, int] = {}
        self.ordered: list[Job] | None = None
        self.by_share: dict[str, list[Job]] = {}
        self.search: dict[tuple[str, int, int], tuple[tuple[tuple[Job, str], ...], int] | None] = {}


class Engine:
    """Scheduling state of one job queue and every rule that changes it.

    Typical use (the simulator and the live bridge both do this at each instant ``now``):
    ``complete``/``cancel``/``set_*`` for what happened, ``submit`` for new jobs, then
    ``schedule(now)`` for admissions and preemptions, then ``timeouts(now)``.
    Methods that stop or start jobs return :class:`Decision` lists in the order things
    happened; the caller applies them (live) or prints them (simulator).
    """

    def __init__(
        self,
        instance_types: Iterable[InstanceType],
        shares: Iterable[ShareConfig],
        *,
        incremental: bool = True,
    ) -> None:
        """``incremental=False`` makes every cycle examine every pending job; it gives the
        same decisions, only slower, and exists so tests can prove exactly that."""
        self._incremental = incremental
        self._types: dict[str, _Type] = {t.name: _Type(t) for t in instance_types}
        self._shares: dict[str, ShareConfig] = {}
        for share in shares:
            self._shares[share.name] = replace(share, limits=dict(share.limits))
        self._jobs: dict[str, Job] = {}
        self._pending: dict[str, Job] = {}
        # pending jobs indexed by type then share: job id -> (job, smallest count on type)
        # pending jobs indexed by type, share, then their smallest count on the type
        self._buckets: dict[str, dict[str, dict[int, dict[str, Job]]]] = {}
        self._dirty_jobs: set[str] = set()
        self._dirty_types: set[str] = set(self._types)
        # pending job -> clock at which it was last found to fit nowhere
        self._failed_at: dict[str, int] = {}
        self._last_collect = -1
        """Clock at the last incremental ``_collect``."""
        self._time_sensitive: set[str] = set()
        self._cache: dict[str, _TypeCache] = {}
        self._clock = 0
        self._tver: dict[str, int] = {}
        # clock of the last change of a type that may make any job fit more easily, and
        # per (type, share) of changes that may help only that share's jobs
        self._eased: dict[str, int] = {}
        self._eased_for: dict[tuple[str, str], int] = {}
        self._deadlines: list[tuple[int, int, str]] = []
        self._now: int | None = None
        self._seq = 0

    # ------------------------------------------------------------------ reading

    @property
    def instance_types(self) -> dict[str, InstanceType]:
        """Instance type specs, with current capacity."""
        return {n: replace(t.spec, capacity=t.capacity) for n, t in self._types.items()}

    @property
    def shares(self) -> dict[str, ShareConfig]:
        """Current share configurations (copies: change them with ``set_share``)."""
        return {n: replace(s, limits=dict(s.limits)) for n, s in self._shares.items()}

    def job(self, job_id: str) -> Job:
        """The job record (live object: read it, do not mutate it directly)."""
        return self._jobs[job_id]

    def jobs(self) -> Iterator[Job]:
        """All jobs the engine knows, in submission order."""
        return iter(self._jobs.values())

    def pending_jobs(self) -> list[Job]:
        """Pending jobs in submission order."""
        return sorted(self._pending.values(), key=lambda j: j.seq)

    def usage(self, share: str, instance_type: str) -> int:
        """Instances share's running jobs hold on a type."""
        return self._types[instance_type].usage.get(share, 0)

    def accounting(self, instance_type: str) -> list[ShareUsage]:
        """Per-share limit/usage/own/borrowed/idle/free on a type (DESIGN section 2)."""
        ts = self._types[instance_type]
        account = accounting.account_type(
            ts.capacity,
            [
                accounting.ShareOnType(
                    key=name,
                    policy=cfg.policy.value,
                    limit=cfg.limits.get(instance_type),
                    usage=ts.usage.get(name, 0),
                )
                for name, cfg in self._shares.items()
            ],
        )
        return [
            ShareUsage(
                share=row.key,
                instance_type=instance_type,
                limit=row.limit,
                usage=row.usage,
                own=row.own,
                borrowed=row.borrowed,
                idle=row.idle,
                free=row.free,
            )
            for row in account.shares
        ]

    def work_at(self, job: Job, now: int) -> Work:
        """Work the job has done by ``now`` (extrapolated at its type's speed)."""
        if job.state is not JobState.RUNNING or job.instance_type is None:
            return job.work_done
        begin = max(job.progress_at or 0, (job.run_started_at or 0) + job.run_overhead)
        done = work_rules.work_done(
            progress=job.work_done,
            since=begin,
            now=now,
            rate=self._types[job.instance_type].speed,
            duration=job.duration,
        )
        return _norm(done)  # type: ignore[arg-type]

    def checkpoint_at(self, job: Job, now: int) -> Work:
        """Work saved by the job's last checkpoint at ``now``."""
        saved = job.last_checkpoint
        interval = job.checkpoint_interval
        if interval:
            work = self.work_at(job, now)
            periodic = (work // interval) * interval
            if periodic > saved:
                saved = periodic
        return _norm(saved)

    def lost_work_at(self, job: Job, now: int) -> Work:
        """Work a preemption at ``now`` would throw away (never below 0)."""
        lost = work_rules.lost_work(
            work=self.work_at(job, now), checkpoint=self.checkpoint_at(job, now)
        )
        return _norm(lost)  # type: ignore[arg-type]

    def finish_time(self, job: Job) -> int | None:
        """When a running job with a known duration completes if left alone."""
        if job.state is not JobState.RUNNING or job.duration is None or job.instance_type is None:
            return None
        begin = max(job.progress_at or 0, (job.run_started_at or 0) + job.run_overhead)
        remaining = job.duration - job.work_done
        speed = self._types[job.instance_type].speed
        needed = remaining if speed == 1 else Fraction(remaining) / speed
        return begin + max(0, _ceil(needed))

    def next_deadline(self) -> int | None:
        """Earliest max-pending deadline still to come (for event-driven callers)."""
        while self._deadlines:
            deadline, _, job_id = self._deadlines[0]
            job = self._jobs.get(job_id)
            if job is not None and job.state is JobState.PENDING and job.started_at is None:
                return deadline
            heapq.heappop(self._deadlines)
        return None

    # ------------------------------------------------------------------ changes

    def add_instance_type(self, spec: InstanceType) -> None:
        """Add a type to the queue (a new type makes no job stop)."""
        if spec.name in self._types:
            raise ValueError(f"instance type {spec.name!r} exists")
        self._types[spec.name] = _Type(spec)
        self._touch_type(spec.name)

    def add_share(self, share: ShareConfig) -> None:
        """Add a share to the queue."""
        if share.name in self._shares:
            raise ValueError(f"share {share.name!r} exists")
        self._shares[share.name] = replace(share, limits=dict(share.limits))
        for name in share.limits:
            self._touch_type(name)

    def submit(self, job: Job) -> None:
        """Add a new pending job. Its work and counters are kept as given."""
        if job.id in self._jobs:
            raise ValueError(f"job {job.id!r} exists")
        if job.share not in self._shares:
            raise ValueError(f"job {job.id!r}: unknown share {job.share!r}")
        self._seq += 1
        job.seq = self._seq
        self._jobs[job.id] = job
        if job.state is JobState.RUNNING:
            self._restore_running(job)
        elif job.state is JobState.PENDING:
            self._add_pending(job)
            self._register_deadline(job)

    def restore(self, jobs: Iterable[Job]) -> None:
        """Load jobs in any state (live bridge): RUNNING ones must carry their placement
        (``instance_type``, ``count``, ``preference``, ``run_started_at``)."""
        for job in jobs:
            self.submit(job)

    def report_progress(
        self, job_id: str, now: int, work_done: Work, last_checkpoint: Work | None = None
    ) -> None:
        """Record progress the executor reports (work done at ``now``, last checkpoint)."""
        job = self._jobs[job_id]
        job.work_done = exact(work_done)
        job.progress_at = now
        if last_checkpoint is not None:
            job.last_checkpoint = exact(last_checkpoint)
        if job.state is JobState.RUNNING and job.instance_type is not None:
            self._touch_type(job.instance_type)  # victim order may change

    def complete(self, job_id: str, now: int) -> list[Decision]:
        """A running job finished its work."""
        job = self._jobs[job_id]
        if job.state is not JobState.RUNNING:
            return []
        if job.duration is not None:
            job.work_done = job.duration
        job.progress_at = now
        self._stop_running(job)
        job.state = JobState.SUCCEEDED
        job.finished_at = now
        return [Decision("completed", job.id, now)]

    def cancel(self, job_id: str, now: int) -> list[Decision]:
        """Cancel a pending or running job; finished jobs are left alone."""
        job = self._jobs[job_id]
        if job.state in FINAL_STATES:
            return []
        if job.state is JobState.RUNNING:
            job.work_done = self.work_at(job, now)
            job.progress_at = now
            self._stop_running(job)
        else:
            self._remove_pending(job)
        job.state = JobState.CANCELLED
        job.finished_at = now
        return [Decision("cancelled", job.id, now)]

    def set_priority(self, job_id: str, priority: int) -> None:
        """Change a job's priority; it takes effect at the next cycle."""
        job = self._jobs[job_id]
        if job.state is JobState.RUNNING and job.instance_type is not None:
            ts = self._types[job.instance_type]
            self._unindex_priority(ts, job.share, job.priority, job.count)
            prios = ts.lower_prios[job.share]
            index = bisect_right(prios, priority)
            prios.insert(index, priority)
            ts.lower_counts[job.share].insert(index, job.count)
        job.priority = priority
        if job.state is JobState.PENDING:
            self._remove_pending(job)
            self._add_pending(job)
        elif job.state is JobState.RUNNING and job.instance_type is not None:
            self._touch_type(job.instance_type)

    def set_share(self, name: str, **fields: object) -> None:
        """Change any share field; ``limits`` replaces the whole map.

        Never stops a job by itself: usage beyond the new limit counts as borrowed and
        becomes open to reclaim in the cycles that follow.
        """
        unknown = set(fields) - _SHARE_FIELDS
        if unknown:
            raise ValueError(f"unknown share fields: {sorted(unknown)}")
        cfg = self._shares[name]
        touched = set(cfg.limits)
        for ts in self._types.values():
            if ts.usage.get(name):
                touched.add(ts.name)
        for key, value in fields.items():
            if key == "limits":
                assert isinstance(value, dict)
                value = {str(k): int(v) for k, v in value.items()}
            elif key == "policy":
                value = Policy(str(value))
            setattr(cfg, key, value)
        touched |= set(cfg.limits)
        for type_name in touched:
            self._touch_type(type_name)
        for job in self._pending.values():
            if job.share == name:
                self._dirty_jobs.add(job.id)

    def set_capacity(self, instance_type: str, capacity: int, now: int) -> list[Decision]:
        """Change a type's capacity. A drop below usage stops jobs at once
        (``capacity_lost``): jobs of shares still borrowing on the type first, then any,
        in victim order, with a minimal victim set. Not counted against retries."""
        ts = self._types[instance_type]
        ts.capacity = capacity
        self._touch_type(instance_type)
        if ts.total <= capacity:
            return []
        self._set_now(now)
        ordered = self._victim_order(ts)
        removed: dict[str, int] = {}
        freed = 0
        excess = ts.total - capacity
        picks: list[Job] = []
        for borrowing_only in (True, False):
            for victim in ordered:
                if freed >= excess:
                    break
                if victim in picks:
                    continue
                share = victim.share
                if borrowing_only:
                    lim = self._limit(share, instance_type)
                    if ts.usage.get(share, 0) - removed.get(share, 0) <= lim:
                        continue
                picks.append(victim)
                removed[share] = removed.get(share, 0) + victim.count
                freed += victim.count
        for victim in reversed(list(picks)):
            if freed - victim.count >= excess:
                picks.remove(victim)
                freed -= victim.count
        out: list[Decision] = []
        for victim in picks:
            self._preempt(victim, "capacity_lost", None, now, out)
        return out

    # ------------------------------------------------------------------ scheduling

    def schedule(self, now: int) -> list[Decision]:
        """Run cycles at ``now`` until one admits and preempts nothing.

        Returns admitted, preempted and failed decisions in the order they happened
        (a victim's ``preempted`` before its preemptor's ``admitted``).
        """
        self._set_now(now)
        out: list[Decision] = []
        for _ in range(MAX_CYCLES_PER_INSTANT):
            if not self._cycle(now, out):
                break
        return out

    def timeouts(self, now: int) -> list[Decision]:
        """Time out never-started jobs that have waited their max pending time.

        Only jobs with at least one accelerated preference have a deadline.
        """
        out: list[Decision] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, job_id = heapq.heappop(self._deadlines)
            job = self._jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING or job.started_at is not None:
                continue
            self._remove_pending(job)
            job.state = JobState.TIMED_OUT
            job.finished_at = now
            out.append(Decision("timed_out", job.id, now))
        return out

    def choose(self, job_id: str) -> Placement | None:
        """The placement the preference choice gives a pending job in the current state
        (first preference that fits without preemption, else first with)."""
        return self._choose(self._jobs[job_id])

    def explain(self, job_id: str) -> list[Reason]:
        """One reason per preference why a pending job waits (DESIGN section 4)."""
        from scheduler.engine.explain import reason_for

        job = self._jobs[job_id]
        reasons = []
        for index, pref in enumerate(job.preferences):
            reasons.append(reason_for(self, job, index, pref))
        return reasons

    def copy(self) -> Engine:
        """An independent copy for what-if previews (caches are rebuilt lazily)."""
        clone = Engine.__new__(Engine)
        clone._incremental = self._incremental
        clone._types = {}
        for name, ts in self._types.items():
            nts = _Type(ts.spec)
            nts.capacity = ts.capacity
            clone._types[name] = nts
        clone._shares = {n: replace(s, limits=dict(s.limits)) for n, s in self._shares.items()}
        clone._jobs = {}
        clone._pending = {}
        clone._buckets = {}
        clone._dirty_jobs = set(self._dirty_jobs)
        clone._dirty_types = set(self._dirty_types)
        clone._failed_at = {}
        clone._last_collect = -1
        clone._time_sensitive = set(self._time_sensitive)
        clone._cache = {}
        clone._clock = self._clock
        clone._tver = dict(self._tver)
        clone._eased = dict(self._eased)
        clone._eased_for = dict(self._eased_for)
        clone._deadlines = list(self._deadlines)
        clone._now = self._now
        clone._seq = self._seq
        for job_id, job in self._jobs.items():
            new = replace(job)
            clone._jobs[job_id] = new
            if new.state is JobState.PENDING:
                clone._add_pending(new)
            elif new.state is JobState.RUNNING:
                clone._index_running(new)
        clone._dirty_jobs = set(self._dirty_jobs)
        return clone

    # ------------------------------------------------------------------ internals: index

    def _set_now(self, now: int) -> None:
        if now != self._now:
            self._now = now
            # The order of reclaim victims depends on lost work, which depends on time;
            # searches that failed only because of that order must be tried again.
            for name in self._time_sensitive:
                self._touch_type(name)
            self._time_sensitive.clear()
            for cache in self._cache.values():
                cache.ordered = None
                cache.by_share = {}
                cache.search = {}

    def _touch_type(self, name: str, easing_only_for: str | None = None) -> None:
        """Record a change of type ``name``. Any change may make some job fit more
        easily, unless ``easing_only_for`` names the one share whose jobs it may help
        (an admission that leaves its share not borrowing on T: for every other share
        it only adds usage, so it cannot turn a failed fit into a fit; see ``_admit``)."""
        self._clock += 1
        self._tver[name] = self._clock
        if easing_only_for is None:
            self._eased[name] = self._clock
        else:
            self._eased_for[(name, easing_only_for)] = self._clock
        self._cache.pop(name, None)
        self._dirty_types.add(name)

    def _eased_since(self, type_name: str, share: str) -> int:
        """Clock of the last change of T that may help a job of ``share`` fit."""
        return max(self._eased.get(type_name, 0), self._eased_for.get((type_name, share), 0))

    def _limit(self, share: str, instance_type: str) -> int:
        """Entitlement for accounting: a type missing from the limits counts as 0."""
        return self._shares[share].limits.get(instance_type, 0)

    def _add_pending(self, job: Job) -> None:
        job.state = JobState.PENDING
        self._pending[job.id] = job
        for type_name, count in _smallest_counts(job).items():
            by_count = self._buckets.setdefault(type_name, {}).setdefault(job.share, {})
            by_count.setdefault(count, {})[job.id] = job
        self._dirty_jobs.add(job.id)

    def _remove_pending(self, job: Job) -> None:
        if self._pending.pop(job.id, None) is None:
            return
        self._failed_at.pop(job.id, None)
        for type_name, count in _smallest_counts(job).items():
            by_count = self._buckets[type_name][job.share]
            group = by_count[count]
            del group[job.id]
            if not group:
                del by_count[count]
        self._dirty_jobs.discard(job.id)

    def _register_deadline(self, job: Job) -> None:
        if job.max_pending is None or job.started_at is not None:
            return
        if any(
            (ts := self._types.get(p.instance_type)) is not None and ts.accelerated
            for p in job.preferences
        ):
            heapq.heappush(self._deadlines, (job.submitted_at + job.max_pending, job.seq, job.id))

    def _index_running(self, job: Job) -> None:
        assert job.instance_type is not None
        ts = self._types[job.instance_type]
        ts.usage[job.share] = ts.usage.get(job.share, 0) + job.count
        ts.total += job.count
        ts.running.setdefault(job.share, {})[job.id] = job
        prios = ts.lower_prios.setdefault(job.share, [])
        index = bisect_right(prios, job.priority)
        prios.insert(index, job.priority)
        ts.lower_counts.setdefault(job.share, []).insert(index, job.count)

    def _restore_running(self, job: Job) -> None:
        if job.instance_type is None or job.instance_type not in self._types:
            raise ValueError(f"running job {job.id!r} needs a known instance_type")
        if job.run_started_at is None:
            raise ValueError(f"running job {job.id!r} needs run_started_at")
        if job.progress_at is None:
            job.progress_at = job.run_started_at
        self._index_running(job)
        self._touch_type(job.instance_type)

    def _stop_running(self, job: Job) -> None:
        assert job.instance_type is not None
        ts = self._types[job.instance_type]
        ts.usage[job.share] -= job.count
        if not ts.usage[job.share]:
            del ts.usage[job.share]
        ts.total -= job.count
        del ts.running[job.share][job.id]
        self._unindex_priority(ts, job.share, job.priority, job.count)
        self._touch_type(job.instance_type)

    @staticmethod
    def _unindex_priority(ts: _Type, share: str, priority: int, count: int) -> None:
        prios = ts.lower_prios[share]
        counts = ts.lower_counts[share]
        index = bisect_left(prios, priority)
        while counts[index] != count:
            index += 1
        del prios[index]
        del counts[index]

    # ------------------------------------------------------------------ internals: fits

    def _type_cache(self, ts: _Type) -> _TypeCache:
        cache = self._cache.get(ts.name)
        if cache is None:
            reserve_idle = 0
            borrowers = []
            for name, cfg in self._shares.items():
                lim = cfg.limits.get(ts.name, 0)
                used = ts.usage.get(name, 0)
                if cfg.policy is Policy.RESERVE and lim > used:
                    reserve_idle += lim - used
                if used > lim:
                    borrowers.append(name)
            cache = _TypeCache(reserve_idle, frozenset(borrowers))
            self._cache[ts.name] = cache
        return cache

    def _free(self, ts: _Type, cache: _TypeCache, share: str) -> int:
        """free(S,T): capacity minus usage minus RESERVE idle of the other shares."""
        reserved = cache.reserve_idle
        cfg = self._shares[share]
        if cfg.policy is Policy.RESERVE:
            reserved -= max(0, cfg.limits.get(ts.name, 0) - ts.usage.get(share, 0))
        return max(0, ts.capacity - ts.total - reserved)

    def _reserved_for(self, ts: _Type, cache: _TypeCache, share: str) -> int:
        """Idle entitlement of RESERVE shares other than ``share`` on T."""
        reserved = cache.reserve_idle
        cfg = self._shares[share]
        if cfg.policy is Policy.RESERVE:
            reserved -= max(0, cfg.limits.get(ts.name, 0) - ts.usage.get(share, 0))
        return reserved

    def _reclaimable(self, ts: _Type, cache: _TypeCache, share: str) -> int:
        """Upper bound of what reclaim from other shares can free on T: a borrower loses
        jobs only while still borrowing, so at most its borrowed amount plus one job."""
        total = 0
        for other in cache.borrowers:
            if other == share:
                continue
            biggest = cache.biggest.get(other)
            if biggest is None:
                biggest = max(j.count for j in ts.running[other].values())
                cache.biggest[other] = biggest
            over = ts.usage[other] - self._limit(other, ts.name)
            total += min(ts.usage[other], over + biggest - 1)
        return total

    def _maxfit(self, ts: _Type, cache: _TypeCache, share: str) -> int:
        """Largest count share S can place on T without preemption (-1: none)."""
        room = cache.maxfit.get(share)
        if room is not None:
            return room
        cfg = self._shares[share]
        lim = cfg.limits.get(ts.name)
        if lim is None:
            room = -1
        else:
            free = self._free(ts, cache, share)
            used = ts.usage.get(share, 0)
            room = lim - used
            if cfg.policy is Policy.LEND_AND_BORROW:
                cap = cfg.borrow_cap(ts.name)
                room = free if cap is None else max(room, lim + cap - used)
            room = min(free, room)
        cache.maxfit[share] = room
        return room

    def _borrowed_after(self, share: str, type_name: str, used: int, count: int) -> int:
        lim = self._shares[share].limits.get(type_name, 0)
        return max(0, min(count, used + count - lim))

    def _choose(self, job: Job) -> Placement | None:
        """Preference choice: first fit without preemption, else first with."""
        share = job.share
        for index, pref in enumerate(job.preferences):
            ts = self._types.get(pref.instance_type)
            if ts is None:
                continue
            if pref.count <= self._maxfit(ts, self._type_cache(ts), share):
                used = ts.usage.get(share, 0)
                borrowed = self._borrowed_after(share, ts.name, used, pref.count)
                return Placement(index, ts.name, pref.count, borrowed)
        for index, pref in enumerate(job.preferences):
            ts = self._types.get(pref.instance_type)
            if ts is None:
                continue
            found = self._search(ts, share, pref.count, job.priority)
            if found is not None:
                victims, borrowed = found
                return Placement(index, ts.name, pref.count, borrowed, victims)
        return None

    def _victim_order(self, ts: _Type) -> list[Job]:
        """Running jobs on T in victim order: priority ascending, least lost work, most
        recently started, id descending."""
        now = self._now if self._now is not None else 0
        jobs = [job for per_share in ts.running.values() for job in per_share.values()]
        jobs.sort(key=lambda j: j.id, reverse=True)
        jobs.sort(key=lambda j: (j.priority, self.lost_work_at(j, now), -(j.run_started_at or 0)))
        return jobs

    def _sorted_victims(self, jobs: list[Job]) -> list[Job]:
        """``jobs`` in victim order (see ``_victim_order``)."""
        now = self._now if self._now is not None else 0
        jobs.sort(key=lambda j: j.id, reverse=True)
        jobs.sort(key=lambda j: (j.priority, self.lost_work_at(j, now), -(j.run_started_at or 0)))
        return jobs

    def _ordered(self, ts: _Type, cache: _TypeCache) -> list[Job]:
        """Running jobs of the shares borrowing on T, in victim order (reclaim group):
        the victim order restricted to them, so only they need sorting."""
        if cache.ordered is None:
            cache.ordered = self._sorted_victims(
                [job for name in cache.borrowers for job in ts.running[name].values()]
            )
        return cache.ordered

    def _share_ordered(self, ts: _Type, cache: _TypeCache, share: str) -> list[Job]:
        """Running jobs of one share on T in victim order (in-share group)."""
        found = cache.by_share.get(share)
        if found is None:
            found = self._sorted_victims(list(ts.running.get(share, {}).values()))
            cache.by_share[share] = found
        return found

    def _fits_after(
        self,
        ts: _Type,
        cache: _TypeCache,
        share: str,
        count: int,
        removed: dict[str, int],
        freed: int,
        own_only: bool,
    ) -> bool:
        """Would the placement fit without preemption once ``removed`` is set aside?"""
        cfg = self._shares[share]
        name = ts.name
        lim = cfg.limits.get(name, 0)
        used = ts.usage.get(share, 0) - removed.get(share, 0)
        reserved = cache.reserve_idle
        if cfg.policy is Policy.RESERVE:
            reserved -= max(0, lim - ts.usage.get(share, 0))
        for other, amount in removed.items():
            if other == share:
                continue
            ocfg = self._shares[other]
            if ocfg.policy is Policy.RESERVE:
                olim = ocfg.limits.get(name, 0)
                oused = ts.usage.get(other, 0)
                reserved += max(0, olim - (oused - amount)) - max(0, olim - oused)
        free = ts.capacity - (ts.total - freed) - reserved
        if count > free:
            return False
        if used + count <= lim:
            return True
        if own_only or cfg.policy is not Policy.LEND_AND_BORROW:
            return False
        cap = cfg.borrow_cap(name)
        return cap is None or used + count - lim <= cap

    def _search(
        self, ts: _Type, share: str, count: int, priority: int
    ) -> tuple[tuple[tuple[Job, str], ...], int] | None:
        """Victims that make a placement fit, or None (DESIGN "fits with preemption")."""
        cache = self._type_cache(ts)
        bound = cache.bound.get(share)
        if bound is None:
            bound = self._bound(ts, cache, share)
        _, lim, base, inshare, own_room, borrow_room = bound
        if lim < 0 or count > lim:
            return None  # only a job within its share's limit may preempt on T
        # base: raw room plus what reclaim could free at most (victims add what they hold)
        lower = 0
        lower_held = 0
        if inshare:
            prios = ts.lower_prios.get(share)
            if prios:
                lower = bisect_left(prios, priority)
                if lower:
                    lower_held = sum(ts.lower_counts[share][:lower])
        if not _preemption_may_help(count, base, own_room, borrow_room, lower_held):
            return None  # even every candidate together would not make it fit
        used = ts.usage.get(share, 0)
        own_jobs: list[Job] = []
        if lower:
            own_jobs = self._share_ordered(ts, cache, share)
        key = (share, count, lower)
        if key in cache.search:
            return cache.search[key]
        result = None
        if used < lim:
            result = self._greedy(ts, cache, share, count, own_jobs[:lower], True)
        if result is None and lower:
            result = self._greedy(ts, cache, share, count, own_jobs[:lower], False)
        cache.search[key] = result
        return result

    def _greedy(
        self,
        ts: _Type,
        cache: _TypeCache,
        share: str,
        count: int,
        own_lower: list[Job],
        own_placement: bool,
    ) -> tuple[tuple[tuple[Job, str], ...], int] | None:
        """One greedy pass, then give victims back in reverse pick order.

        ``own_placement``: the first search (group 1 reclaim, then group 2 in-share,
        own placement only); otherwise group 2 alone for any placement.
        """
        removed: dict[str, int] = {}
        freed = 0
        picks: list[tuple[Job, str]] = []
        fits = False
        skipped_borrower = False
        # victims add at most what they hold to the room, so no fit is possible before:
        need = count - (ts.capacity - ts.total - self._reserved_for(ts, cache, share))
        if own_placement:
            for victim in self._ordered(ts, cache):
                other = victim.share
                if other == share:
                    continue
                taken = removed.get(other, 0)
                if ts.usage[other] - taken <= self._limit(other, ts.name):
                    skipped_borrower = True  # no longer borrowing once picks are set aside
                    continue
                picks.append((victim, "reclaim"))
                removed[other] = taken + victim.count
                freed += victim.count
                if freed >= need and self._fits_after(
                    ts, cache, share, count, removed, freed, True
                ):
                    fits = True
                    break
        if not fits:
            for victim in own_lower:
                picks.append((victim, "priority"))
                removed[share] = removed.get(share, 0) + victim.count
                freed += victim.count
                if freed >= need and self._fits_after(
                    ts, cache, share, count, removed, freed, own_placement
                ):
                    fits = True
                    break
        if not fits:
            if skipped_borrower:
                self._time_sensitive.add(ts.name)
            return None
        for index in range(len(picks) - 1, -1, -1):
            victim = picks[index][0]
            removed[victim.share] -= victim.count
            if self._fits_after(
                ts, cache, share, count, removed, freed - victim.count, own_placement
            ):
                freed -= victim.count
                del picks[index]
            else:
                removed[victim.share] += victim.count
        used = ts.usage.get(share, 0) - removed.get(share, 0)
        return tuple(picks), self._borrowed_after(share, ts.name, used, count)

    def _may_fit(self, ts: _Type, cache: _TypeCache, share: str, count: int, priority: int) -> bool:
        """Exact necessary condition: False only when the job surely cannot fit on T,
        with or without preemption (``_search`` starts with the same bound).

        Victims free at most what they hold: reclaim at most ``_reclaimable`` and only
        for an own placement (it leaves the share's usage as it is), in-share victims at
        most what the share's lower-priority jobs hold (``lower_held``), which also
        lowers the share's usage. So a fit with preemption needs ``count <= room +
        reclaimable + lower_held`` and, after in-share victims, an own placement
        (``count - lower_held <= limit - usage``) or, with in-share victims, a borrowing
        one within the borrow cap. Monotone: a smaller count or a higher priority never
        makes it False, so a bucket's smallest count and highest priority bound it.
        """
        bound = cache.bound.get(share)
        if bound is None:
            bound = self._bound(ts, cache, share)
        maxfit, lim, base, inshare, own_room, borrow_room = bound
        if count <= maxfit:
            return True
        if count > lim:
            return False
        lower_held = 0
        if inshare:
            prios = ts.lower_prios.get(share)
            if prios:
                lower = bisect_left(prios, priority)
                if lower:
                    lower_held = sum(ts.lower_counts[share][:lower])
        return _preemption_may_help(count, base, own_room, borrow_room, lower_held)

    def _bound(
        self, ts: _Type, cache: _TypeCache, share: str
    ) -> tuple[int, int, int, bool, int, int]:
        """(maxfit, limit or -1, room + reclaimable, in-share preemption on,
        limit - usage, limit + borrow cap - usage or +/- _HUGE) of a share on T."""
        cfg = self._shares[share]
        lim = cfg.limits.get(ts.name)
        maxfit = self._maxfit(ts, cache, share)
        if lim is None:
            bound = (maxfit, -1, 0, False, -_HUGE, -_HUGE)
        else:
            used = ts.usage.get(share, 0)
            room = ts.capacity - ts.total - self._reserved_for(ts, cache, share)
            if used < lim:
                room += self._reclaimable(ts, cache, share)
            if cfg.policy is not Policy.LEND_AND_BORROW:
                borrow_room = -_HUGE
            else:
                cap = cfg.borrow_cap(ts.name)
                borrow_room = _HUGE if cap is None else lim + cap - used
            bound = (maxfit, lim, room, cfg.in_share_preemption, lim - used, borrow_room)
        cache.bound[share] = bound
        return bound

    def _threshold(self, ts: _Type, cache: _TypeCache, share: str, count: int) -> int:
        """``_may_fit`` of a count on T as a priority threshold: a job of the share
        asking ``count`` may fit exactly when its priority is above the result
        (``_HUGE``: none may). The bound grows with the priority only through the
        in-share victims a job has, so it is monotone in the priority."""
        bound = cache.bound.get(share)
        if bound is None:
            bound = self._bound(ts, cache, share)
        maxfit, lim, base, inshare, own_room, borrow_room = bound
        if count <= maxfit:
            return -_HUGE
        if count > lim:
            return _HUGE
        if _preemption_may_help(count, base, own_room, borrow_room, 0):
            return -_HUGE
        if inshare:
            # smallest number k of lowest-priority jobs of the share that would do; a job
            # has at least k below it exactly when its priority exceeds prios[k - 1]
            prios = ts.lower_prios.get(share, [])
            held = 0
            for k, held_k in enumerate(ts.lower_counts.get(share, [])):
                held += held_k
                if _preemption_may_help(count, base, own_room, borrow_room, held):
                    return prios[k]
        return _HUGE

    def _groups_may_fit(
        self, ts: _Type, cache: _TypeCache, share: str, by_count: dict[int, dict[str, Job]]
    ) -> Iterator[tuple[int, dict[str, Job], int]]:
        """The count groups of a share's pending jobs on T that may fit, smallest first,
        as ``(count, jobs, threshold)`` (see ``_threshold``). Stops at the first group
        none of which may fit: larger counts cannot either (monotone)."""
        for count in sorted(by_count):
            threshold = self._threshold(ts, cache, share, count)
            if threshold == _HUGE:
                return
            yield count, by_count[count], threshold

    # ------------------------------------------------------------------ internals: cycle

    def _collect(self) -> dict[str, Job]:
        """Jobs a cycle must examine; every other pending job surely fits nowhere."""
        found: dict[str, Job] = {}
        if not self._incremental:
            self._dirty_jobs.clear()
            self._dirty_types.clear()
            return dict(self._pending)
        types = self._types
        failed = self._failed_at
        last = self._last_collect
        self._last_collect = self._clock
        thresholds: dict[tuple[str, str, int], int] = {}  # the state is fixed meanwhile
        for job_id in self._dirty_jobs:
            job = self._pending.get(job_id)
            if job is None:
                continue
            share = job.share
            for pref in job.preferences:
                memo_key = (pref.instance_type, share, pref.count)
                threshold = thresholds.get(memo_key)
                if threshold is None:
                    ts = types.get(pref.instance_type)
                    threshold = (
                        _HUGE
                        if ts is None
                        else self._threshold(ts, self._type_cache(ts), share, pref.count)
                    )
                    thresholds[memo_key] = threshold
                if job.priority > threshold:
                    found[job_id] = job
                    break
        for type_name in self._dirty_types:
            ts = self._types.get(type_name)
            by_share = self._buckets.get(type_name)
            if ts is None or not by_share:
                continue
            cache = self._type_cache(ts)
            eased_all = self._eased.get(type_name, 0)
            for share, by_count in by_share.items():
                if not by_count:
                    continue
                eased_at = max(eased_all, self._eased_for.get((type_name, share), 0))
                if eased_at <= last:
                    # nothing on T changed in this share's favour since the last cycle
                    # collected: its jobs there were examined then or known to fail
                    continue
                for _, group, threshold in self._groups_may_fit(ts, cache, share, by_count):
                    for job_id, job in group.items():
                        if job.priority <= threshold or job_id in found:
                            continue
                        if failed.get(job_id, -1) < eased_at:  # else failed since T eased
                            found[job_id] = job
        self._dirty_jobs.clear()
        self._dirty_types.clear()
        return found

    @staticmethod
    def _order_key(job: Job, tentative: Placement | None) -> tuple[int, int, int, str]:
        borrows = 1 if tentative is not None and tentative.borrowed > 0 else 0
        return (borrows, -job.priority, job.submitted_at, job.id)

    def _cycle(self, now: int, out: list[Decision]) -> bool:
        """One cycle (DESIGN "A cycle"); True when it admitted or preempted anything."""
        candidates = self._collect()
        if not candidates:
            return False
        stamp = self._clock
        tentative: dict[str, Placement | None] = {}
        heap: list[tuple[tuple[int, int, int, str], Job]] = []
        for job_id, job in candidates.items():
            tent = self._choose(job)
            tentative[job_id] = tent
            heap.append((self._order_key(job, tent), job))
        heapq.heapify(heap)
        seen = set(tentative)
        changed = False
        tver = self._tver
        while heap:
            key, job = heapq.heappop(heap)
            if job.state is not JobState.PENDING:
                continue
            first = tentative.get(job.id)
            if job.id in tentative and not any(
                tver.get(p.instance_type, 0) > stamp for p in job.preferences
            ):
                placement: Placement | None = first
                evaluated = stamp
            else:
                evaluated = self._clock
                placement = self._choose(job)
            if placement is None:
                # fits nowhere in the state as of ``evaluated``: only a later change of
                # one of its types can make it fit (see ``_collect``)
                self._failed_at[job.id] = evaluated
                continue
            if placement.borrowed > 0 and (first is None or first.borrowed == 0):
                self._dirty_jobs.add(job.id)  # skipped: it may borrow in the next cycle
                continue
            self._admit(job, placement, now, out, seen)
            changed = True
            self._push_later(placement.instance_type, stamp, key, heap, seen)
        return changed

    def _push_later(
        self,
        type_name: str,
        stamp: int,
        key: tuple[int, int, int, str],
        heap: list[tuple[tuple[int, int, int, str], Job]],
        seen: set[str],
    ) -> None:
        """After a change on T mid-cycle, queue the untouched jobs on T whose turn is
        still to come (they had no tentative placement, so they sort as non-borrowing)."""
        if key[0] != 0:
            return
        by_share = self._buckets.get(type_name)
        if not by_share:
            return
        ts = self._types[type_name]
        cache = self._type_cache(ts)
        failed = self._failed_at
        eased_all = self._eased.get(type_name, 0)
        for share, by_count in by_share.items():
            if not by_count:
                continue
            eased_at = max(eased_all, self._eased_for.get((type_name, share), 0))
            if eased_at <= stamp:
                continue  # nothing on T changed in its favour since this cycle collected
            for _, group, threshold in self._groups_may_fit(ts, cache, share, by_count):
                for job_id, job in group.items():
                    if job.priority <= threshold or job_id in seen:
                        continue
                    if failed.get(job_id, -1) >= eased_at:
                        continue
                    job_key = (0, -job.priority, job.submitted_at, job_id)
                    if job_key > key:
                        seen.add(job_id)
                        heapq.heappush(heap, (job_key, job))

    def _admit(
        self, job: Job, placement: Placement, now: int, out: list[Decision], seen: set[str]
    ) -> None:
        for victim, rule in placement.victims:
            self._preempt(victim, rule, job.id, now, out)
            seen.add(victim.id)
        self._remove_pending(job)
        job.state = JobState.RUNNING
        job.instance_type = placement.instance_type
        job.count = placement.count
        job.preference = placement.preference
        job.borrowed = placement.borrowed
        if job.started_at is None:
            job.started_at = now
        job.run_started_at = now
        job.progress_at = now
        job.run_overhead = job.restart_overhead if job.preemptions else 0
        self._index_running(job)
        ts = self._types[placement.instance_type]
        if ts.usage[job.share] > self._limit(job.share, ts.name):
            self._touch_type(ts.name)  # a new borrower: more to reclaim for everyone
        else:
            # not borrowing: other shares only see usage grow (less free room, the same
            # borrowers and reclaim victims), so their failed fits stay failed; its own
            # share gains a possible in-share victim
            self._touch_type(ts.name, easing_only_for=job.share)
        out.append(
            Decision(
                "admitted",
                job.id,
                now,
                instance_type=placement.instance_type,
                count=placement.count,
                preference=placement.preference,
                borrowed=placement.borrowed,
                rule="borrow" if placement.borrowed else "own",
            )
        )

    def _preempt(
        self, victim: Job, rule: str, by: str | None, now: int, out: list[Decision]
    ) -> None:
        """Stop a running job: it keeps its last checkpoint, loses the rest, and is
        requeued with its original submission time unless its retries are exhausted."""
        saved = self.checkpoint_at(victim, now)
        lost = self.lost_work_at(victim, now)
        self._stop_running(victim)
        victim.work_done = saved
        victim.last_checkpoint = saved
        victim.progress_at = now
        victim.recomputed = _norm(victim.recomputed + lost)
        victim.preemptions += 1
        if rule != "capacity_lost":
            victim.counted_preemptions += 1
        out.append(
            Decision(
                "preempted",
                victim.id,
                now,
                instance_type=victim.instance_type,
                count=victim.count,
                rule=rule,
                by=by,
                lost_work=lost,
            )
        )
        retries = self._shares[victim.share].preemption_retries
        if retries is not None and victim.counted_preemptions > retries:
            victim.state = JobState.FAILED
            victim.finished_at = now
            out.append(Decision("failed", victim.id, now, rule="preemption_retries_exhausted"))
        else:
            self._add_pending(victim)


_HUGE = 1 << 62


def _smallest_counts(job: Job) -> dict[str, int]:
    """Per type of a job's preferences, the smallest count it asks there."""
    counts: dict[str, int] = {}
    for pref in job.preferences:
        old = counts.get(pref.instance_type)
        if old is None or pref.count < old:
            counts[pref.instance_type] = pref.count
    return counts


def _preemption_may_help(
    count: int, base: int, own_room: int, borrow_room: int, lower_held: int
) -> bool:
    """Necessary condition for a fit with preemption (see ``Engine._may_fit``)."""
    if count > base + lower_held:
        return False
    if count - lower_held <= own_room:
        return True
    return lower_held > 0 and count - lower_held <= borrow_room


def _norm(value: Work) -> Work:
    if isinstance(value, Fraction) and value.denominator == 1:
        return value.numerator
    return value


def _ceil(value: Work) -> int:
    return -((-value) // 1)
