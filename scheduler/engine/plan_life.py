"""A capacity plan's life in the engine (docs/scheduling.md#capacity-plans): added, started,
resized, ended.

A plan's start and end are instants of the run, like max-pending deadlines:
:func:`advance` is what the engine does at each instant before anything else is decided
there (after completions): plans whose ``end`` has come are ended, their running jobs
preempted with ``plan_ended`` (plans and their jobs in file order), and plans whose
``start`` has come become active, which like capacity arriving may let pending jobs
fit. :func:`set_count` changes a plan's count like capacity: a drop below its usage
stops jobs on the plan as ``capacity_lost``. Neither counts against retries.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.engine import cycle
from scheduler.engine.model import Decision, Job, Plan, Rule, plan_pool
from scheduler.engine.plans import PlanPool, plan_count_drop
from scheduler.engine.state import QueueState


@dataclass(frozen=True, slots=True)
class PlanUsage:
    """A capacity plan now (docs/scheduling.md#capacity-plans): its count, the instances its jobs
    hold, and whether it is active; for pages and API (plan capacity apart from on-demand)."""

    plan: str
    instance_type: str
    share: str
    count: int
    usage: int
    active: bool
    jobs: tuple[str, ...]


def plan_pools(state: QueueState) -> list[PlanPool]:
    """The queue's plan pools in the order the plans were added (file order)."""
    return [pool for pool in state.plans.values() if isinstance(pool, PlanPool)]


def add(state: QueueState, plan: Plan) -> PlanPool:
    """Register a plan; it is active at once when the engine's instant lies in it."""
    if plan.pool in state.plans:
        raise ValueError(f"plan {plan.name!r} exists")
    if plan.share not in state.shares:
        raise ValueError(f"plan {plan.name!r}: unknown share {plan.share!r}")
    spec = state.pools.get(plan.instance_type)
    if spec is None:
        raise ValueError(f"plan {plan.name!r}: unknown instance type {plan.instance_type!r}")
    if plan.count < 0 or plan.end <= plan.start:
        raise ValueError(f"plan {plan.name!r}: needs count >= 0 and end > start")
    pool = PlanPool(plan, spec.spec, state.shares)
    state.plans[plan.pool] = pool
    if state.now is not None:
        pool.started = plan.start <= state.now
        pool.ended = plan.end <= state.now
        pool.active = plan.active_at(state.now)
    state.touch(pool.name)
    return pool


def advance(state: QueueState, now: int) -> list[Decision]:
    """The plans' instants up to ``now``: end what has ended (preempting its jobs with
    ``plan_ended``), then start what has started. Idempotent at one instant."""
    out: list[Decision] = []
    pools = plan_pools(state)
    due = [pool for pool in pools if not pool.ended and pool.plan.end <= now]
    if due:
        state.set_now(now)
    for pool in due:
        pool.ended = True
        pool.started = True
        pool.active = False
        for victim in sorted(pool.jobs(), key=_file_order):
            cycle.preempt(state, victim, Rule.PLAN_ENDED, None, now, out)
        state.touch(pool.name)
    for pool in pools:
        if not pool.started and pool.plan.start <= now:
            pool.started = True
            pool.active = not pool.ended
            state.touch(pool.name)  # like capacity arriving
    return out


def set_count(state: QueueState, name: str, count: int, now: int) -> list[Decision]:
    """Change a plan's count; a drop below its usage stops jobs on it (``capacity_lost``:
    one greedy pass in victim order, then the minimal set)."""
    pool = find(state, name)
    if count < 0:
        raise ValueError(f"plan {name!r}: count must be at least 0")
    pool.capacity = count
    state.touch(pool.name)
    if pool.total <= count:
        return []
    state.set_now(now)
    out: list[Decision] = []
    for victim in plan_count_drop(pool, state.lost_work, pool.total - count):
        cycle.preempt(state, victim, Rule.CAPACITY_LOST, None, now, out)
    return out


def next_instant(state: QueueState) -> int | None:
    """The earliest plan start or end the engine has not passed yet."""
    times = [
        pool.plan.start if not pool.started else pool.plan.end
        for pool in plan_pools(state)
        if not pool.ended
    ]
    return min(times) if times else None


def usage(state: QueueState, name: str) -> PlanUsage:
    """A plan's figures now (its running jobs by id)."""
    pool = find(state, name)
    return PlanUsage(
        plan=name,
        instance_type=pool.plan.instance_type,
        share=pool.plan.share,
        count=pool.capacity,
        usage=pool.total,
        active=pool.active,
        jobs=tuple(sorted(job.id for job in pool.jobs())),
    )


def copy_plans(source: QueueState, target: QueueState) -> None:
    """Empty copies of the source's plan pools in the target (for ``Engine.copy``; the
    caller re-adds the running jobs)."""
    for key, pool in source.plans.items():
        assert isinstance(pool, PlanPool)
        fresh = PlanPool(pool.plan, pool.spec, target.shares, pool.capacity)
        fresh.active, fresh.started, fresh.ended = pool.active, pool.started, pool.ended
        target.plans[key] = fresh


def find_or_none(state: QueueState, name: str) -> PlanPool | None:
    pool = state.plans.get(plan_pool(name))
    return pool if isinstance(pool, PlanPool) else None


def find(state: QueueState, name: str) -> PlanPool:
    pool = state.plans.get(plan_pool(name))
    if not isinstance(pool, PlanPool):
        raise KeyError(f"unknown plan {name!r}")
    return pool


def check_preferences(state: QueueState, job: Job) -> None:
    """A job may name a plan only when it is a training job of the plan's share, with the
    plan's type (docs/scheduling.md#capacity-plans); raise ValueError otherwise. A plan the engine
    was not given (a live caller may load only current plans) is no error: the preference
    never fits, and its reason is ``plan_not_active``."""
    for index, pref in enumerate(job.preferences):
        if pref.plan is None:
            continue
        if job.kind != "training":
            raise ValueError(f"job {job.id!r}: only training jobs may name a plan")
        pool = state.plans.get(pref.pool)
        if not isinstance(pool, PlanPool):
            continue
        if pool.plan.share != job.share:
            raise ValueError(
                f"job {job.id!r}: plan {pref.plan!r} belongs to share {pool.plan.share!r}"
            )
        if pref.instance_type != pool.plan.instance_type:
            raise ValueError(
                f"job {job.id!r}: preference {index} must have the plan's instance type "
                f"{pool.plan.instance_type!r}"
            )


def _file_order(job: Job) -> int:
    return job.order if job.order is not None else job.seq
