"""Why a pending job waits: one reason code and an actionable sentence per preference.

The codes are checked in the order docs/scheduling.md#why-is-my-job-waiting gives; the first that
applies wins. Messages name the share, the type and the numbers, so a team lead can see what to
change
(a limit, a borrow limit, a policy, the job's count or preferences) or that waiting is
the answer.
"""

from __future__ import annotations

from scheduler.engine.accounting import ShareAccount, TypeAccount
from scheduler.engine.constraints import OVER_BUDGET
from scheduler.engine.model import Job, Policy, Preference, Reason, ShareConfig, Work, plain
from scheduler.engine.plans import PlanPool


def _plural(count: int, word: str = "instance") -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _span(units: int, hour: int) -> str:
    """A run time in time units, for people (hour: time units in an hour)."""
    seconds = units * 3600 // hour
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def _money(value: Work | float) -> str:
    return f"{float(value):,.2f}"


def _choice(index: int) -> str:
    words = ("first", "second", "third", "fourth", "fifth")
    return f"{words[index]} choice" if index < len(words) else f"choice {index + 1}"


def eligibility_reason(
    job: Job, index: int, code: str, now: int, runtime: int, cost: Work, hour: int
) -> Reason:
    """Why a preference is not eligible: over the job's budget, or too late for its
    deadline (``runtime`` and ``cost`` are the preference's expected R and C)."""
    pref = job.preferences[index]
    where = f"{pref.count} x {pref.instance_type}" + (
        f" on plan '{pref.plan}'" if pref.plan is not None else ""
    )
    if code == OVER_BUDGET:
        assert job.max_cost is not None
        return Reason(
            index,
            code,
            f"The {_choice(index)} ({where}) would run about {_span(runtime, hour)} and cost "
            f"about {_money(cost)}, more than the job's budget of {_money(plain(job.max_cost))}: "
            "it is not considered; raise the budget or rely on the other choices.",
        )
    assert job.deadline is not None
    late = now + runtime - job.deadline
    return Reason(
        index,
        code,
        f"Started now, the {_choice(index)} ({where}) would need about "
        f"{_span(runtime, hour)} and end {_span(late, hour)} after the job's deadline: it is "
        "no longer considered; the job runs on a choice that still meets the deadline, or "
        "times out when none does.",
    )


def reason_for(
    share: ShareConfig,
    job: Job,
    index: int,
    pref: Preference,
    account: TypeAccount[str] | None,
    row: ShareAccount[str] | None,
) -> Reason:
    """The first reason (docs/scheduling.md#why-is-my-job-waiting) that applies to one preference
    of a pending job.

    ``account`` is the accounting of the preference's type (None: the queue has no such
    type) and ``row`` the share's line in it: the public figures the pages show.

    Long because the wait reasons are tried in their documented order and the first that
    applies wins: one table read top to bottom.
    """
    type_name = pref.instance_type
    count = pref.count
    limit = share.limits.get(type_name)
    if limit is None:
        return Reason(
            index,
            "no_limit_for_type",
            f"Share '{share.name}' has no limit for {type_name}, so it cannot run there: "
            f"ask the queue owner to add a {type_name} limit to the share, or remove this "
            "preference.",
        )
    capacity = account.capacity if account is not None else 0
    if account is None or row is None or capacity < count:
        return Reason(
            index,
            "capacity_unavailable",
            f"The queue has {_plural(capacity)} of {type_name} and this preference asks for "
            f"{count}: lower the count, prefer another type, or ask for more capacity.",
        )
    used = row.usage
    free = row.free
    if used + count <= limit:
        who = "borrowers of other shares"
        if share.in_share_preemption:
            who += f" or jobs of '{share.name}' with priority below {job.priority}"
        return Reason(
            index,
            "no_preemptible_victims",
            f"Share '{share.name}' uses {used} of its {limit} {type_name} limit, so {count} "
            f"more fit within it, but only {free} are free and stopping {who} cannot free "
            f"{count}: the instances are held by other shares within their own limits "
            "(or reserved); wait for running jobs to finish or lower the count.",
        )
    if not job.may_borrow:
        return Reason(
            index,
            "own_quota_full",
            f"Share '{share.name}' uses {used} of its {limit} {type_name} limit and this job "
            f"is marked not to borrow, so {count} more would exceed it: wait for the share's "
            "jobs to finish, or raise the limit.",
        )
    if share.policy is not Policy.LEND_AND_BORROW:
        return Reason(
            index,
            "own_quota_full",
            f"Share '{share.name}' uses {used} of its {limit} {type_name} limit and its "
            f"policy {share.policy.value} cannot borrow, so {count} more would exceed it: "
            "wait for the share's jobs to finish, raise the limit, or switch the policy to "
            "LEND_AND_BORROW.",
        )
    cap = share.borrow_cap(type_name)
    if cap is not None and used + count - limit > cap:
        return Reason(
            index,
            "borrow_limit_reached",
            f"Share '{share.name}' uses {used} {type_name} against a limit of {limit} and may "
            f"borrow at most {cap} beyond it (borrow limit {share.borrow_limit}%); {count} "
            f"more would borrow {used + count - limit}: wait for the share's jobs to finish "
            "or raise its borrow limit.",
        )
    in_use = account.usage
    reserved = max(0, capacity - in_use - free)
    return Reason(
        index,
        "no_lendable_capacity",
        f"Share '{share.name}' may borrow {count} {type_name}, but only {free} of the queue's "
        f"{capacity} are free to it ({in_use} in use, {reserved} kept idle for RESERVE "
        "shares): wait for capacity to free up, or ask lenders to lend.",
    )


def plan_reason(pool: PlanPool | None, index: int, pref: Preference) -> Reason:
    """Why a plan preference waits (docs/scheduling.md#capacity-plans): the first of
    plan_not_active, plan_too_small, else plan_full; the on-demand codes never apply to a plan.
    ``pool``
    None: the engine does not know the plan (a live caller did not load it): not active."""
    if pool is None:
        return Reason(
            index,
            "plan_not_active",
            f"Plan '{pref.plan}' is not available in this queue now: the job runs on its "
            "other preferences, or waits.",
        )
    plan = pool.plan
    count = pref.count
    if not pool.active:
        return Reason(
            index,
            "plan_not_active",
            f"Plan '{plan.name}' runs from {plan.start} to {plan.end} and is not active now: "
            "the job runs on its other preferences meanwhile, or waits for the plan's start.",
        )
    if count > pool.capacity:
        return Reason(
            index,
            "plan_too_small",
            f"Plan '{plan.name}' has {_plural(pool.capacity)} of {plan.instance_type} and this "
            f"preference asks for {count}: lower the count or grow the plan.",
        )
    return Reason(
        index,
        "plan_full",
        f"Plan '{plan.name}' has {_plural(pool.capacity)} of {plan.instance_type}, "
        f"{pool.total} in use by the share's jobs, so {count} more do not fit: wait for "
        "them to finish, or let the job fall back to an on-demand preference.",
    )
