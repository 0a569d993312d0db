"""The :class:`Engine`: the one object the live scheduler and the scenario runner drive.

A thin facade over the parts of docs/scheduling.md, each in its own module: the state and
its indices (:mod:`~scheduler.engine.state`), entitlement accounting
(:mod:`~scheduler.engine.accounting`), fits and the preference choice
(:mod:`~scheduler.engine.placement`), victims (:mod:`~scheduler.engine.preemption`), the
incremental candidate index (:mod:`~scheduler.engine.candidates`) and the cycle
(:mod:`~scheduler.engine.cycle`). Methods that stop or start jobs return
:class:`Decision` lists in the order things happened; the caller applies them (live) or
prints them (simulator).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from scheduler.engine import accounting, constraints, cycle, plan_life, preemption, work
from scheduler.engine.explain import eligibility_reason, plan_reason, reason_for
from scheduler.engine.model import (
    FINAL_STATES,
    TRAINING,
    Decision,
    DecisionKind,
    InstanceType,
    Job,
    JobState,
    Plan,
    Policy,
    Reason,
    Rule,
    ShareConfig,
    Work,
    exact,
    plan_pool,
)
from scheduler.engine.placement import Placement
from scheduler.engine.plan_life import PlanUsage
from scheduler.engine.state import Pool, QueueState

_SHARE_FIELDS = frozenset(
    {"policy", "borrow_limit", "limits", "in_share_preemption", "preemption_retries"}
)

__all__ = ["Engine", "Placement", "PlanUsage", "ShareUsage"]


@dataclass(frozen=True, slots=True)
class ShareUsage:
    """Accounting of one share on one type (docs/scheduling.md), for pages and API."""

    share: str
    instance_type: str
    limit: int
    usage: int
    own: int
    borrowed: int
    idle: int
    free: int


class Engine:
    """Scheduling state of one job queue and every rule that changes it.

    Typical use at each instant ``now``: ``complete``/``cancel``/``set_*`` for what
    happened, ``submit`` for new jobs, then ``schedule(now)`` for admissions and
    preemptions, then ``timeouts(now)``.
    """

    def __init__(
        self,
        instance_types: Iterable[InstanceType],
        shares: Iterable[ShareConfig],
        *,
        plans: Iterable[Plan] = (),
        incremental: bool = True,
        hour: int = constraints.HOUR_SECONDS,
    ) -> None:
        """``incremental=False`` makes every cycle examine every pending job as docs/scheduling.md
        words it; same decisions, only slower: it exists so tests can prove exactly that.
        ``plans`` are added in order (:meth:`add_plan`). ``hour`` is the number of time
        units in an hour (3,600,000 when times are milliseconds): hourly prices turn
        into a preference's expected cost with it."""
        self._incremental = incremental
        self._state = QueueState(list(instance_types), list(shares), hour)
        self._deadlines: list[tuple[int, int, str]] = []
        self._accounts: dict[str, tuple[int, accounting.TypeAccount[str]]] = {}
        for plan in plans:
            self.add_plan(plan)

    # ------------------------------------------------------------------ reading

    @property
    def instance_types(self) -> dict[str, InstanceType]:
        """Instance type specs, with current capacity."""
        return {n: replace(p.spec, capacity=p.capacity) for n, p in self._state.pools.items()}

    @property
    def shares(self) -> dict[str, ShareConfig]:
        """Current share configurations (copies: change them with ``set_share``)."""
        return {n: replace(s, limits=dict(s.limits)) for n, s in self._state.shares.items()}

    def share_limit(self, share: str, instance_type: str) -> int:
        """A share's current limit on a type (0 without one): one figure, where ``shares``
        copies every share's configuration."""
        return self._state.shares[share].limits.get(instance_type, 0)

    @property
    def plans(self) -> dict[str, Plan]:
        """Capacity plans by name, in the order added, with their current count."""
        return {
            pool.plan.name: replace(pool.plan, count=pool.capacity)
            for pool in plan_life.plan_pools(self._state)
        }

    def plan_usage(self, name: str) -> PlanUsage:
        """A plan's count, usage, activity and running jobs (apart from on-demand)."""
        return plan_life.usage(self._state, name)

    def job(self, job_id: str) -> Job:
        """The job record (live object: read it, do not mutate it directly)."""
        return self._state.jobs[job_id]

    def jobs(self) -> Iterator[Job]:
        """All jobs the engine knows, in submission order."""
        return iter(self._state.jobs.values())

    def running_jobs(self) -> Iterator[Job]:
        """The running jobs, pool by pool: without walking the pending backlog, which in
        a deep queue is most of ``jobs()``."""
        for pool in (*self._state.pools.values(), *self._state.plans.values()):
            for per_share in pool.running.values():
                yield from per_share.values()

    def pending_jobs(self) -> list[Job]:
        """Pending jobs in submission order."""
        return sorted(self._state.pending.values(), key=lambda j: j.seq)

    def pending_count(self) -> int:
        """How many jobs are pending (the backlog depth), without sorting them."""
        return len(self._state.pending)

    def type_account(self, instance_type: str) -> accounting.TypeAccount[str]:
        """:func:`accounting.account_type` of a type now, shares in configuration order."""
        st = self._state
        pool = st.pools[instance_type]
        version = st.version.get(instance_type, 0)
        cached = self._accounts.get(instance_type)
        if cached is not None and cached[0] == version:
            return cached[1]
        account = accounting.account_type(
            pool.capacity,
            [
                accounting.ShareOnType(
                    key=name,
                    policy=cfg.policy.value,
                    limit=cfg.limits.get(instance_type),
                    usage=pool.usage.get(name, 0),
                )
                for name, cfg in st.shares.items()
            ],
        )
        self._accounts[instance_type] = (version, account)
        return account

    def accounting(self, instance_type: str) -> list[ShareUsage]:
        """Per-share limit/usage/own/borrowed/idle/free on a type (docs/scheduling.md)."""
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
            for row in self.type_account(instance_type).shares
        ]

    def _speed(self, job: Job) -> Work:
        assert job.instance_type is not None
        return self._state.pools[job.instance_type].speed  # a plan runs at its type's speed

    def work_at(self, job: Job, now: int) -> Work:
        """Work the job has done by ``now`` (extrapolated at its type's speed)."""
        if job.state is not JobState.RUNNING or job.instance_type is None:
            return job.work_done
        return work.work_at(job, self._speed(job), now)

    def checkpoint_at(self, job: Job, now: int) -> Work:
        """Work saved by the job's last checkpoint at ``now``."""
        speed = self._speed(job) if job.instance_type is not None else 1
        return work.checkpoint_at(job, speed, now)

    def lost_work_at(self, job: Job, now: int) -> Work:
        """Work a preemption at ``now`` would throw away (never below 0)."""
        if job.state is not JobState.RUNNING or job.instance_type is None:
            return 0
        return work.lost_work_at(job, self._speed(job), now)

    def finish_time(self, job: Job) -> int | None:
        """When a running job with a known duration completes if left alone."""
        if job.instance_type is None:
            return None
        return work.finish_time(job, self._speed(job))

    def next_deadline(self) -> int | None:
        """Earliest time-driven instant still to come (for event-driven callers): a
        max-pending deadline, the instant a job times out for its deadline, or a plan's
        start or end the engine has not passed."""
        found = plan_life.next_instant(self._state) if self._state.plans else None
        while self._deadlines:
            deadline, _, job_id = self._deadlines[0]
            job = self._state.jobs.get(job_id)
            if _waits_for(job, deadline):
                found = deadline if found is None else min(deadline, found)
                break
            heapq.heappop(self._deadlines)
        due = self._state.due
        while due:
            at, _, job_id = due[0]
            job = self._state.pending.get(job_id)
            if job is not None and job.timeout_at == at:
                found = at if found is None else min(at, found)
                break
            heapq.heappop(due)
        return found

    def next_eligibility_change(self) -> int | None:
        """The next instant, after the engine's, at which a pending job's preference
        stops being eligible for its deadline (its reason changes then); None: none."""
        st = self._state
        after = st.now if st.now is not None else st.hint
        found = None
        for at, _, job_id in st.cutoffs:
            if at > after and job_id in st.pending and (found is None or at < found):
                found = at
        return found

    def explain(self, job_id: str, now: int | None = None) -> list[Reason]:
        """One reason per preference why a pending job waits
        (docs/scheduling.md#why-is-my-job-waiting), judged at ``now`` (default: the engine's
        instant): a preference that is not eligible
        (its budget, the job's deadline) gives that reason before any other."""
        st = self._state
        job = st.jobs[job_id]
        share = st.shares[job.share]
        at = now if now is not None else (st.now if st.now is not None else st.hint)
        constrained = bool(job.over_budget or job.last_eligible)
        reasons = []
        for index, pref in enumerate(job.preferences):
            code = constraints.ineligible_code(job, index, at) if constrained else None
            if code is not None:
                reasons.append(self._ineligible(job, index, code, at))
                continue
            if pref.plan is not None:
                pool = plan_life.find_or_none(self._state, pref.plan)
                reasons.append(plan_reason(pool, index, pref))
                continue
            account = row = None
            if pref.instance_type in self._state.pools:
                account = self.type_account(pref.instance_type)
                row = next(r for r in account.shares if r.key == job.share)
            reasons.append(reason_for(share, job, index, pref, account, row))
        return reasons

    # ------------------------------------------------------------------ changes

    def submit(self, job: Job, *, keep_seq: bool = False) -> None:
        """Add a new pending job (or, from ``restore``, one in any state).

        ``keep_seq``: the job carries its own ``seq`` (a positive number no other job
        has), for a caller that adds and re-adds jobs in any order yet wants the ties
        broken as if they had come in that order (the live cycle: the job's id)."""
        st = self._state
        if job.id in st.jobs:
            raise ValueError(f"job {job.id!r} exists")
        if job.share not in st.shares:
            raise ValueError(f"job {job.id!r}: unknown share {job.share!r}")
        if st.plans or job.kind != TRAINING:
            plan_life.check_preferences(st, job)  # without plans, only the kind can be wrong
        if job.state is JobState.RUNNING:
            if job.instance_type is None or job.instance_type not in st.pools:
                raise ValueError(f"running job {job.id!r} needs a known instance_type")
            if job.plan is not None and plan_pool(job.plan) not in st.plans:
                raise ValueError(f"running job {job.id!r} runs on unknown plan {job.plan!r}")
            if job.run_started_at is None:
                raise ValueError(f"running job {job.id!r} needs run_started_at")
        if keep_seq:
            if job.seq <= 0:
                raise ValueError(f"job {job.id!r} needs a positive seq")
            st.seq = max(st.seq, job.seq)
        else:
            st.seq += 1
            job.seq = st.seq
        st.jobs[job.id] = job
        if job.state is JobState.RUNNING:
            if job.progress_at is None:
                job.progress_at = job.run_started_at
            st.start_running(job)
            st.touch(st.pool_of(job).name)
        elif job.state is JobState.PENDING:
            st.add_pending(job)
            self._register_deadline(job)

    def restore(
        self, jobs: Iterable[Job], now: int | None = None, *, keep_seq: bool = False
    ) -> None:
        """Load jobs in any state (live bridge): RUNNING ones must carry their placement
        (``instance_type``, ``count``, ``preference``, ``run_started_at``). ``now``: the
        instant the caller will schedule next, if known (eligibility of pending jobs is
        then judged from it at once). ``keep_seq``: as :meth:`submit`."""
        if now is not None and self._state.now is None:
            self._state.hint = now
        for job in jobs:
            self.submit(job, keep_seq=keep_seq)

    def forget(self, job_id: str) -> None:
        """Drop a job in any state, as if it had never been submitted (a live caller
        that re-reads a changed job removes it and restores it from its new record).
        Running, it frees its instances like a completion; unknown, nothing happens."""
        st = self._state
        job = st.jobs.pop(job_id, None)
        if job is None:
            return
        if job.state is JobState.RUNNING and job.instance_type is not None:
            st.stop_running(job)
        elif job.state is JobState.PENDING:
            st.remove_pending(job)

    def report_progress(
        self, job_id: str, now: int, work_done: Work, last_checkpoint: Work | None = None
    ) -> None:
        """Record progress the executor reports (work done at ``now``, last checkpoint)."""
        job = self._state.jobs[job_id]
        job.work_done = exact(work_done)
        job.progress_at = now
        if last_checkpoint is not None:
            job.last_checkpoint = exact(last_checkpoint)
        if job.state is JobState.RUNNING and job.instance_type is not None:
            self._state.touch(self._state.pool_of(job).name)  # victim order may change
        elif job.state is JobState.PENDING and (
            job.deadline is not None or job.max_cost is not None
        ):
            self._state.reconstrain(job)  # its remaining work, so its R, moved

    def complete(self, job_id: str, now: int) -> list[Decision]:
        """A running job finished its work."""
        job = self._state.jobs[job_id]
        if job.state is not JobState.RUNNING:
            return []
        if job.duration is not None:
            job.work_done = job.duration
        job.progress_at = now
        self._state.stop_running(job)
        job.state = JobState.SUCCEEDED
        job.finished_at = now
        return [Decision(DecisionKind.COMPLETED, job.id, now)]

    def cancel(self, job_id: str, now: int) -> list[Decision]:
        """Cancel a pending or running job; finished jobs are left alone."""
        job = self._state.jobs[job_id]
        if job.state in FINAL_STATES:
            return []
        if job.state is JobState.RUNNING:
            job.work_done = self.work_at(job, now)
            job.progress_at = now
            self._state.stop_running(job)
        else:
            self._state.remove_pending(job)
        job.state = JobState.CANCELLED
        job.finished_at = now
        return [Decision(DecisionKind.CANCELLED, job.id, now)]

    def set_priority(self, job_id: str, priority: int) -> None:
        """Change a job's priority; it takes effect at the next cycle."""
        st = self._state
        job = st.jobs[job_id]
        if job.state is JobState.RUNNING and job.instance_type is not None:
            pool = st.pool_of(job)
            pool.reprioritise(job, priority)
            st.index.own_changed(pool.name, job.share)
            job.priority = priority
            st.touch(pool.name)
        elif job.state is JobState.PENDING:
            st.remove_pending(job)
            job.priority = priority
            st.add_pending(job)
        else:
            job.priority = priority

    def set_share(self, name: str, **fields: object) -> None:
        """Change any share field; ``limits`` replaces the whole map.

        Never stops a job by itself: usage beyond the new limit counts as borrowed and
        becomes open to reclaim in the cycles that follow.
        """
        unknown = set(fields) - _SHARE_FIELDS
        if unknown:
            raise ValueError(f"unknown share fields: {sorted(unknown)}")
        st = self._state
        cfg = st.shares[name]
        touched = set(cfg.limits)
        touched.update(pool.name for pool in st.pools.values() if pool.usage.get(name))
        for key, value in fields.items():
            if key == "limits":
                assert isinstance(value, dict)
                value = {str(k): int(v) for k, v in value.items()}
            elif key == "policy":
                value = Policy(str(value))
            setattr(cfg, key, value)
        st.index.share_changed(name)
        touched |= set(cfg.limits)
        for pool in st.pools.values():
            pool.recount()
        for type_name in sorted(touched):
            if type_name in st.pools:
                st.touch(type_name)
        for on_plan in plan_life.plan_pools(st):
            if on_plan.plan.share == name:
                st.touch(on_plan.name)  # in-share preemption on the plan may change

    def set_capacity(self, instance_type: str, capacity: int, now: int) -> list[Decision]:
        """Change a type's capacity. A drop below usage stops jobs at once
        (``capacity_lost``): jobs of shares still borrowing on the type first, then any,
        in victim order, with a minimal victim set. Not counted against retries."""
        st = self._state
        pool = st.pools[instance_type]
        pool.capacity = capacity
        st.touch(instance_type)
        if pool.total <= capacity:
            return []
        st.set_now(now)
        out: list[Decision] = []
        for victim in preemption.capacity_lost(
            st.shares, pool, st.lost_work, pool.total - capacity
        ):
            cycle.preempt(st, victim, Rule.CAPACITY_LOST, None, now, out)
        return out

    def add_plan(self, plan: Plan) -> None:
        """Add a capacity plan (docs/scheduling.md#capacity-plans). Its start and end are instants
        of the run (:meth:`next_deadline`); it is active in ``[start, end)``."""
        plan_life.add(self._state, plan)

    def set_plan(self, name: str, count: int, now: int) -> list[Decision]:
        """Change a plan's count like capacity: a drop below the plan's usage stops
        jobs on it at once (``capacity_lost``, not counted against retries)."""
        return plan_life.set_count(self._state, name, count, now)

    def advance_plans(self, now: int) -> list[Decision]:
        """The plans' instants up to ``now``: jobs on plans whose end has come are
        preempted (``plan_ended``, not counted against retries; plans and their jobs in
        file order), plans whose start has come become active. Call it after the
        instant's completions; :meth:`schedule` calls it too (a no-op when done)."""
        if not self._state.plans:
            return []
        return plan_life.advance(self._state, now)

    def schedule(self, now: int) -> list[Decision]:
        """Run cycles at ``now`` until one admits and preempts nothing.

        Returns admitted, preempted and failed decisions in the order they happened
        (a victim's ``preempted`` before its preemptor's ``admitted``), after any
        ``plan_ended`` preemptions of :meth:`advance_plans` not yet made at ``now``.
        """
        if not self._state.plans:
            return cycle.schedule(self._state, now, self._incremental)
        out = plan_life.advance(self._state, now)
        out.extend(cycle.schedule(self._state, now, self._incremental))
        return out

    def timeouts(self, now: int) -> list[Decision]:
        """Time out pending jobs: never-started jobs that have waited their max pending
        time (only jobs with an accelerated preference have one; reason
        ``max_pending``), and jobs with a deadline whose preferences are all ineligible,
        one at least because of the deadline (reason ``deadline``; ``max_pending`` when
        both apply). Several at one instant go in submission order, whatever the reason.
        """
        st = self._state
        if (not self._deadlines or self._deadlines[0][0] > now) and (
            not st.due or st.due[0][0] > now
        ):
            return []  # nothing due: the common case, asked at every instant of a run
        late: dict[str, Job] = {}
        max_pending: set[str] = set()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, job_id = heapq.heappop(self._deadlines)
            job = st.jobs.get(job_id)
            if job is None or not _waits_for(job, deadline):
                continue
            late[job.id] = job
            max_pending.add(job.id)
        while st.due and st.due[0][0] <= now:
            job_id = heapq.heappop(st.due)[2]
            job = st.pending.get(job_id)
            if job is not None and job.timeout_at is not None and job.timeout_at <= now:
                late[job.id] = job
        out: list[Decision] = []
        for job in sorted(late.values(), key=lambda j: (j.submitted_at, j.seq)):
            st.remove_pending(job)
            job.state = JobState.TIMED_OUT
            job.finished_at = now
            reason = Rule.MAX_PENDING if job.id in max_pending else Rule.DEADLINE
            out.append(Decision(DecisionKind.TIMED_OUT, job.id, now, rule=reason))
        return out

    def copy(self) -> Engine:
        """An independent copy for what-if previews (indices are rebuilt)."""
        st = self._state
        clone = Engine(
            [replace(p.spec, capacity=p.capacity) for p in st.pools.values()],
            list(st.shares.values()),
            incremental=self._incremental,
            hour=st.hour,
        )
        cst = clone._state
        for name, pool in st.pools.items():
            cst.pools[name] = Pool(pool.spec, cst.shares, pool.capacity)
        plan_life.copy_plans(st, cst)
        cst.clock = st.clock
        cst.version = dict(st.version)
        cst.now = st.now
        cst.hint = st.hint
        cst.time_sensitive = set(st.time_sensitive)
        cst.seq = st.seq
        clone._deadlines = list(self._deadlines)
        for job_id, job in st.jobs.items():
            new = replace(job)
            cst.jobs[job_id] = new
            if new.state is JobState.PENDING:
                cst.add_pending(new)
            elif new.state is JobState.RUNNING:
                cst.start_running(new)
        return clone

    # ------------------------------------------------------------------ internals

    def _ineligible(self, job: Job, index: int, code: str, now: int) -> Reason:
        """The reason of a preference its budget or the job's deadline rules out."""
        st = self._state
        pref = job.preferences[index]
        found = st.speed_and_price(pref)
        assert found is not None  # R is known, so is where it runs
        runtime = constraints.expected_runtime(job, pref, found[0])
        assert runtime is not None
        cost = constraints.expected_cost(pref.count, found[1], runtime, st.hour)
        return eligibility_reason(job, index, code, now, runtime, cost, st.hour)

    def _register_deadline(self, job: Job) -> None:
        if job.max_pending is None or job.started_at is not None:
            return
        pools = self._state.pools
        if any(
            (pool := pools.get(p.instance_type)) is not None and pool.accelerated
            for p in job.preferences
        ):
            heapq.heappush(self._deadlines, (job.submitted_at + job.max_pending, job.seq, job.id))


def _waits_for(job: Job | None, deadline: int) -> bool:
    """Whether a max-pending deadline entry still stands: the job is pending, never
    started, and the entry is its own (a job forgotten and restored with another max
    pending time leaves a stale one)."""
    return (
        job is not None
        and job.state is JobState.PENDING
        and job.started_at is None
        and job.max_pending is not None
        and job.submitted_at + job.max_pending == deadline
    )
