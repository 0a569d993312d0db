"""Job submission, cancellation and reprioritisation (docs/data-model.md).

Every function here is the single writer of its change: it checks who may do it,
validates the whole input (all field errors at once), writes the job, its timeline
event and its audit entry in one transaction, and asks for a scheduling cycle of the
job's queue once the transaction commits. Scheduling decisions themselves (admission,
preemption, ...) are applied by the live scheduler, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, cast

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from governance import roles
from governance.models import (
    AuditEntry,
    AuditEvent,
    CapacityPlan,
    ExceptionState,
    InstanceType,
    Interruption,
    Job,
    JobEvent,
    JobKind,
    JobQueue,
    JobState,
    PriorityException,
    Share,
)
from governance.models.capacity import Executor
from governance.models.jobs import ACTIVE_STATES, MAX_PREFERENCES
from governance.models.priorities import MAX_PRIORITY, MIN_PRIORITY
from governance.roles import AnyUser
from governance.selectors import jobs as job_selectors
from governance.selectors import priorities as priority_selectors
from governance.selectors import shares as share_selectors
from governance.services import audit, hooks, inserts, limits
from governance.services import slurm as slurm_services
from governance.services import templates as template_services
from governance.services import workloads as workload_services
from governance.services.errors import Errors, PermissionDenied, ValidationFailed
from governance.services.kit import is_int, job_event, lock_job

NAME_MAX_LENGTH = 200
PLAN_NAME_MAX_LENGTH = 100  # CapacityPlan.name
MAX_COST = Decimal("999999999999.99")  # Job.max_cost: 14 digits, 2 after the point


def job_snapshot(job: Job) -> dict[str, Any]:
    """The job's API fields as JSON, for audit ``before``/``after``."""
    return {
        "id": job.pk,
        "queue": job.queue_id,
        "share": job.share_id,
        "name": job.name,
        "kind": job.kind,
        "priority": job.priority,
        "preferences": job.preferences,
        "count": job.count,
        "max_pending": job.max_pending,
        "checkpoint_interval": job.checkpoint_interval,
        "duration": job.duration,
        "may_borrow": job.may_borrow,
        "preemptible": job.preemptible,
        "deadline": job.deadline.isoformat() if job.deadline else None,
        "max_cost": str(job.max_cost) if job.max_cost is not None else None,
        "workload": job.workload_id,
        "template": job.template,
        "state": job.state,
        "submitter": job.submitter_id,
        "submitted_at": job.submitted_at.isoformat() if job.submitted_at else None,
    }


def preference_text(pref: dict[str, Any]) -> str:
    """A preference as people read it: "2 x ml.g5.xlarge" or "2 on plan vision-dec"."""
    if pref.get("plan"):
        return f"{pref.get('count')} on plan {pref['plan']}"
    return f"{pref.get('count')} x {pref.get('instance_type')}"


def priority_refusal(
    *,
    user: AnyUser,
    team_id: int,
    priority: int,
    share_id: int,
    job_id: int | None = None,
    now: datetime | None = None,
    team_role: Any = roles.UNREAD,
    bands: list[tuple[int, list[str]]] | None = None,
) -> str | None:
    """Why ``user`` may not give a job of ``share_id`` this priority, or None if allowed.

    Allowed when the priority is within the highest band the user may use for the team
    (``selectors.priorities.max_usable_priority``), or when an approved, unexpired
    exception for the share (or for the job itself, when ``job_id`` is given) reaches at
    least that priority. With no priority definitions at all (a fresh installation)
    there are no bands to enforce and every priority in range is allowed. ``team_role``:
    the user's membership role in the team, when the caller read it (``roles.band_roles``);
    ``bands``: ``selectors.priorities.band_limits()``, when the caller read them.
    """
    if bands is None:
        bands = priority_selectors.band_limits()
    if not bands:
        return None
    highest = priority_selectors.highest_usable(
        bands, roles.band_roles(user, team_id, team_role=team_role)
    )
    if highest is not None and priority <= highest:
        return None
    now = now or timezone.now()
    covering = PriorityException.objects.filter(
        state=ExceptionState.APPROVED, expires_at__gt=now, priority__gte=priority
    )
    if job_id is not None:
        covering = covering.filter(Q(share_id=share_id) | Q(job_id=job_id))
    else:
        covering = covering.filter(share_id=share_id)
    if covering.exists():
        return None
    band = priority_selectors.band_for(priority)
    band_text = (
        f"band '{band.name}' ({band.min_priority}-{band.max_priority})" if band else ("no band")
    )
    if highest is None:
        return (
            f"Priority {priority} ({band_text}) needs an approved exception: you may use no "
            "priority band for this team."
        )
    top_band = priority_selectors.band_for(highest)
    top_text = f" (band '{top_band.name}')" if top_band else ""
    return (
        f"Priority {priority} ({band_text}) is above the highest you may use without an "
        f"approved exception: {highest}{top_text}."
    )


def _resolve_preferences(
    errors: Errors,
    preferences: Any,
    count: Any,
    share_types: list[str],
    *,
    kind: Any = JobKind.TRAINING,
    share_plans: dict[str, CapacityPlan] | None = None,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Validate the preference list and return it with every count filled in.

    Errors use the key ``preferences`` (messages name the 0-based index and the field,
    as in ``preferences[1].count`` or ``preferences[0].plan``) or ``count`` for the
    job-level count. A preference ``{"plan": NAME, "count": n}`` names a capacity plan
    of the job's share (docs/scheduling.md#capacity-plans): only training jobs may name one, the
    plan must not have ended, and ``instance_type`` may not be given with it (the plan's
    type is implied). ``share_plans`` maps the share's plan names to the plans.

    Long because it is the flat list of one preference's rules, each a check with its
    message, in the order they are reported.
    """
    share_plans = share_plans or {}
    now = now or timezone.now()
    if count is not None and (not is_int(count) or not 1 <= count <= limits.MAX_INSTANCES):
        errors.add(
            "count", f"The count must be empty or a whole number from 1 to {limits.MAX_INSTANCES}."
        )
        count_ok = False
    else:
        count_ok = True
    if not isinstance(preferences, list) or not preferences:
        errors.add(
            "preferences",
            f'Give 1 to {MAX_PREFERENCES} preferences as [{{"instance_type": name, "count": n}}].',
        )
        return []
    if len(preferences) > MAX_PREFERENCES:
        errors.add(
            "preferences",
            f"At most {MAX_PREFERENCES} preferences are allowed; {len(preferences)} given.",
        )
    resolved: list[dict[str, Any]] = []
    seen: set[str] = set()
    with_count = 0
    without_count: list[int] = []
    types_text = ", ".join(share_types) or "none"
    for index, pref in enumerate(preferences):
        key = f"preferences[{index}]"
        if not isinstance(pref, dict):
            errors.add("preferences", f'{key} must be an object {{"instance_type", "count"}}.')
            continue
        unknown = sorted(set(pref) - {"instance_type", "count", "plan", "runtime"})
        if unknown:
            errors.add("preferences", f"{key} has unknown field(s): {', '.join(unknown)}.")
        runtime = pref.get("runtime")
        if runtime is not None and not (is_int(runtime) and 1 <= runtime <= limits.MAX_SECONDS):
            errors.add(
                "preferences",
                f"{key}.runtime must be null or an integer from 1 to {limits.MAX_SECONDS} "
                "(expected seconds on this preference).",
            )
            runtime = None
        if "plan" in pref:
            plan_key = _check_plan_preference(errors, key, pref, kind, share_plans, now)
            if plan_key is not None and plan_key in seen:
                errors.add("preferences", f"{key}.plan {pref['plan']} is listed twice.")
            if plan_key is not None:
                seen.add(plan_key)
            pref_count = pref.get("count")
            if pref_count is None:
                without_count.append(index)
            else:
                with_count += 1
                if not is_int(pref_count) or not 1 <= pref_count <= limits.MAX_INSTANCES:
                    errors.add(
                        "preferences",
                        f"{key}.count must be an integer from 1 to {limits.MAX_INSTANCES}.",
                    )
            resolved.append(_with_runtime({"plan": pref.get("plan"), "count": pref_count}, runtime))
            continue
        type_name = pref.get("instance_type")
        if not isinstance(type_name, str) or not type_name:
            errors.add("preferences", f"{key}.instance_type is required.")
        elif type_name in seen:
            errors.add(
                "preferences",
                f"{key}.instance_type {type_name} is listed twice; each type at most once.",
            )
        elif type_name not in share_types:
            errors.add(
                "preferences",
                f"{key}.instance_type {type_name} has no limit in this share; "
                f"the share's types are: {types_text}.",
            )
        if isinstance(type_name, str):
            seen.add(type_name)
        pref_count = pref.get("count")
        if pref_count is None:
            without_count.append(index)
        else:
            with_count += 1
            if not is_int(pref_count) or not 1 <= pref_count <= limits.MAX_INSTANCES:
                errors.add(
                    "preferences",
                    f"{key}.count must be an integer from 1 to {limits.MAX_INSTANCES}.",
                )
        resolved.append(_with_runtime({"instance_type": type_name, "count": pref_count}, runtime))
    if count is not None and with_count:
        errors.add(
            "count",
            "Give either a count on every preference or one job-level count, not both.",
        )
    elif count is None and with_count and without_count:
        missing = ", ".join(f"preferences[{i}]" for i in without_count)
        errors.add(
            "preferences",
            f"{missing} has no count: give a count on every preference or one job-level count.",
        )
    elif count is None and not with_count:
        errors.add("count", "Give a job-level count or a count on every preference.")
    elif count is not None and count_ok:
        for pref in resolved:
            pref["count"] = count
    return resolved


def _with_runtime(pref: dict[str, Any], runtime: int | None) -> dict[str, Any]:
    """A resolved preference, with its expected ``runtime`` when one was given."""
    if runtime is not None:
        pref["runtime"] = runtime
    return pref


def _check_constraints(
    errors: Errors, may_borrow: Any, preemptible: Any, deadline: Any, max_cost: Any
) -> Decimal | None:
    """The interruption classes and the deadline and budget (docs/scheduling.md); the
    budget as a Decimal (None: none)."""
    for field, value in (("may_borrow", may_borrow), ("preemptible", preemptible)):
        if not isinstance(value, bool):
            errors.add(field, f"{field} must be true or false.")
    if deadline is not None and not (
        isinstance(deadline, datetime) and deadline.tzinfo is not None
    ):
        errors.add("deadline", "deadline must be null or a date and time with its time zone.")
    if max_cost is None:
        return None
    budget: Decimal | None = None
    if isinstance(max_cost, Decimal | int | float) and not isinstance(max_cost, bool):
        try:
            budget = Decimal(str(max_cost))
        except InvalidOperation:  # pragma: no cover - str() of a number parses
            budget = None
    if (
        budget is None
        or not budget.is_finite()
        or not Decimal(0) <= budget <= MAX_COST
        or budget != budget.quantize(Decimal("0.01"))
    ):
        errors.add(
            "max_cost",
            f"max_cost must be null or an amount from 0 to {MAX_COST} in the queue's "
            "currency, with at most 2 decimals.",
        )
        return None
    return budget


def _check_budget(
    errors: Errors,
    budget: Decimal,
    resolved: list[dict[str, Any]],
    duration: int | None,
    share_obj: Share,
    share_plans: dict[str, CapacityPlan],
) -> None:
    """Refuse a job whose every preference would cost more than its budget."""
    names = {p.get("instance_type") for p in resolved} | {
        share_plans[p["plan"]].instance_type.name for p in resolved if p.get("plan") in share_plans
    }
    types = {
        t.name: (t.speed, t.hourly_price)
        for t in InstanceType.objects.filter(name__in=[n for n in names if n])
    }
    plans = {
        name: (plan.instance_type.name, plan.hourly_price) for name, plan in share_plans.items()
    }
    costs = job_selectors.expected_costs(resolved, duration, types, plans)
    limit = Fraction(budget)
    if costs and all(cost is not None and cost > limit for _, cost in costs):
        each = "; ".join(
            f"{preference_text(p)} about {float(cost or 0):,.2f}"
            for p, (_, cost) in zip(resolved, costs, strict=True)
        )
        errors.add(
            "max_cost",
            f"Every preference would cost more than the budget of {budget}: {each}. "
            "Raise the budget, lower a count, or add a cheaper preference.",
        )


def _check_plan_preference(
    errors: Errors,
    key: str,
    pref: dict[str, Any],
    kind: Any,
    share_plans: dict[str, CapacityPlan],
    now: datetime,
) -> str | None:
    """Check a plan preference; its key in the list's duplicate check, or None."""
    plan_name = pref.get("plan")
    if "instance_type" in pref:
        errors.add(
            "preferences",
            f"{key}.instance_type must not be given with a plan: the plan's type is used.",
        )
    if not isinstance(plan_name, str) or not plan_name or len(plan_name) > PLAN_NAME_MAX_LENGTH:
        errors.add(
            "preferences",
            f"{key}.plan must be the name of one of the share's plans "
            f"(at most {PLAN_NAME_MAX_LENGTH} characters).",
        )
        return None
    if kind != JobKind.TRAINING:
        errors.add(
            "preferences",
            f"{key}.plan: only training jobs may name a capacity plan; other jobs use "
            "on-demand instance types.",
        )
    plan = share_plans.get(plan_name)
    if plan is None:
        names = ", ".join(sorted(n for n, p in share_plans.items() if p.end > now)) or "none"
        errors.add(
            "preferences",
            f"{key}.plan {plan_name} is not a plan of this share; its active and upcoming "
            f"plans are: {names}.",
        )
    elif plan.end <= now:
        errors.add(
            "preferences",
            f"{key}.plan {plan_name} ended at {plan.end:%Y-%m-%d %H:%M} UTC; name an active "
            "or upcoming plan.",
        )
    return "plan:" + plan_name


_SECONDS_WORDS = {
    "max_pending": "the longest wait to start (seconds)",
    "checkpoint_interval": "the checkpoint interval (seconds of work)",
    "duration": "the duration (seconds of work)",
}


def _optional_positive(errors: Errors, field: str, value: Any) -> None:
    limits.check_int(
        errors,
        field,
        value,
        minimum=1,
        maximum=limits.MAX_SECONDS,
        nullable=True,
        label=_SECONDS_WORDS.get(field),
    )


def _check_priority_range(errors: Errors, priority: Any) -> bool:
    if not is_int(priority) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        errors.add(
            "priority",
            f"The priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}.",
        )
        return False
    return True


def _actor_name(actor: AnyUser | None) -> str:
    return actor.get_username() if actor is not None and actor.is_authenticated else "the system"


def job_submit(
    *,
    actor: AnyUser,
    share: Share | int,
    name: str,
    preferences: Sequence[dict[str, Any]] | Any,
    priority: int = 0,
    kind: str = JobKind.TRAINING,
    count: int | None = None,
    queue: JobQueue | int | None = None,
    max_pending: int | None = None,
    checkpoint_interval: int | None = None,
    duration: int | None = None,
    program: dict[str, Any] | None = None,
    may_borrow: bool = True,
    preemptible: bool = True,
    deadline: datetime | None = None,
    max_cost: Decimal | float | int | None = None,
    workload: Any = None,
    certification_override: Any = "",
) -> Job:
    """Submit a job to a share: members and leads of the share's team, and admins.

    The share must be enabled; ``queue``, when given, must be the share's queue. The
    preference list is stored resolved (a common ``count`` copied into every preference,
    ``count`` kept). The priority must be within the submitter's bands or covered by an
    approved, unexpired exception for the share. ``may_borrow``, ``preemptible``,
    ``deadline``, ``max_cost`` and a preference's ``runtime`` bound how it may run
    (docs/scheduling.md); a job whose every preference is over its budget is refused.
    ``workload`` (an id) names a workload of the share's team; a ``protected`` one makes
    the job never borrow and never an in-share victim (docs/workloads.md). A job naming a
    workload and no preferences takes the workload's preference template (its certified
    run times as ``runtime``, its defaults where the job gives none; an entry no longer
    certified is skipped with a warning kept in ``Job.template``). In a certified-only
    share every preference must be a certified configuration of the job's workload,
    unless an admin gives a ``certification_override`` reason (audited).

    The checks only read, and the job, its event and its audit entries are written by one
    statement (its id taken with the share, so the others can name it): that statement is
    the transaction, so a submission opens none and costs three round trips, not seven
    (docs/operations.md#submissions-per-second).

    Long because its eighteen keyword arguments are the job's fields, each named once in the
    signature and once where it is stored; the checks between are named steps.
    """
    reads = _submit_share(actor, share.pk if isinstance(share, Share) else share)
    share_obj, share_types = reads.share, reads.type_names
    errors = Errors()
    _check_submit_basics(errors, share_obj, queue, name, kind)
    now = timezone.now()
    workload_obj = workload_services.clean_job_workload(errors, workload, share_obj.team_id)
    expansion: template_services.Expansion | None = None
    if workload_obj is not None and preferences in (None, [], "") and count is None:
        expansion = template_services.expand(errors, workload_obj, now)
        if expansion is not None:
            preferences = expansion.preferences
            max_pending = max_pending if max_pending is not None else expansion.max_pending
            max_cost = max_cost if max_cost is not None else expansion.max_cost
            if deadline is None and expansion.deadline_offset is not None:
                deadline = now + timedelta(seconds=expansion.deadline_offset)
    share_plans = _plans_named(share_obj, preferences, max_cost)
    resolved, override = _check_preferences(
        errors,
        actor,
        share_obj,
        preferences,
        count,
        share_types=share_types,
        kind=kind,
        share_plans=share_plans,
        workload_obj=workload_obj,
        certification_override=certification_override,
        now=now,
    )
    clean_program = _check_program(errors, share_obj, program)
    for field, value in (
        ("max_pending", max_pending),
        ("checkpoint_interval", checkpoint_interval),
        ("duration", duration),
    ):
        _optional_positive(errors, field, value)
    if workload_obj is not None and workload_obj.interruption == Interruption.PROTECTED:
        may_borrow, preemptible = False, False
    budget = _check_constraints(errors, may_borrow, preemptible, deadline, max_cost)
    if budget is not None and resolved and not errors.fields() & {"preferences", "count"}:
        clean_duration = duration if is_int(duration) else None
        _check_budget(errors, budget, resolved, clean_duration, share_obj, share_plans)
    _check_submit_priority(errors, actor, reads, priority)
    errors.raise_if_any()

    job = Job(
        id=reads.new_job_id,
        queue_id=share_obj.queue_id,
        share=share_obj,
        name=name.strip(),
        submitter=cast(Any, actor),
        kind=kind,
        priority=priority,
        preferences=resolved,
        count=count,
        max_pending=max_pending,
        checkpoint_interval=checkpoint_interval,
        duration=duration,
        program=clean_program,
        workload=workload_obj,
        template=expansion.record if expansion is not None else {},
        certification_override=override,
        may_borrow=may_borrow,
        preemptible=preemptible,
        deadline=deadline,
        max_cost=budget,
        state=JobState.PENDING,
        submitted_at=now,
    )
    # The job, its event and its audit entries in one statement, a transaction of its own
    # unless the caller holds one: the checks above only read.
    submitted, entries = _submission_rows(actor, job, share_obj, expansion, now)
    inserts.insert_together([job, submitted, *entries])
    hooks.queue_changed(share_obj.queue_id)
    # A fresh job's timeline is exactly its ``submitted`` event: cache it as prefetched,
    # so ``job.events.all()`` (the API's 201 response) costs no query.
    job._prefetched_objects_cache = {"events": [submitted], "slurm_runs": []}  # type: ignore[attr-defined]
    return job


def _submit_share(actor: AnyUser, share_id: Any) -> share_selectors.SubmissionReads:
    """The share a job is submitted to, when the actor may submit to it, with the rest
    a submission checks itself against, in one query
    (``selectors.shares.share_for_submission``)."""
    found = (
        share_selectors.share_for_submission(share_id, actor.pk)
        if limits.valid_id(share_id)
        else None
    )
    if found is None:
        raise ValidationFailed({"share": [f"No share with id {share_id}."]})
    # Membership first: most submitters are members, and it spares the groups query.
    is_member = actor.is_authenticated and found.role is not None
    if not (is_member or roles.is_admin(actor)):
        raise PermissionDenied(
            {
                "share": [
                    f"Only members and leads of team {found.share.team.name}, and admins, "
                    "may submit jobs to this share."
                ]
            }
        )
    return found


def _plans_named(share_obj: Share, preferences: Any, max_cost: Any) -> dict[str, CapacityPlan]:
    """The share's capacity plans by name, read only when the job can need them: a
    preference naming a plan, or a budget (which prices every plan); {} otherwise."""
    names_plan = isinstance(preferences, list) and any(
        isinstance(p, dict) and "plan" in p for p in preferences
    )
    if not names_plan and max_cost is None:
        return {}
    return {p.name: p for p in CapacityPlan.objects.filter(share=share_obj)}


def _check_submit_basics(
    errors: Errors, share_obj: Share, queue: JobQueue | int | None, name: Any, kind: Any
) -> None:
    """The share accepts jobs, is in ``queue`` when one is given; name and kind."""
    if not share_obj.enabled:
        errors.add("share", f"Share {share_obj} is disabled; it accepts no new jobs.")
    queue_id = queue.pk if isinstance(queue, JobQueue) else queue
    if queue_id is not None and queue_id != share_obj.queue_id:
        errors.add(
            "queue",
            f"Share {share_obj.name} belongs to queue {share_obj.queue.name} "
            f"(id {share_obj.queue_id}), not {queue_id}.",
        )
    if not isinstance(name, str) or not name.strip():
        errors.add("name", "A name is required.")
    elif len(name) > NAME_MAX_LENGTH:
        errors.add("name", f"At most {NAME_MAX_LENGTH} characters.")
    if kind not in JobKind.values:
        errors.add("kind", f"The kind must be one of: {', '.join(JobKind.values)}.")


def _check_preferences(
    errors: Errors,
    actor: AnyUser,
    share_obj: Share,
    preferences: Any,
    count: Any,
    *,
    share_types: list[str],
    kind: Any,
    share_plans: dict[str, CapacityPlan],
    workload_obj: Any,
    certification_override: Any,
    now: datetime,
) -> tuple[list[dict[str, Any]], str]:
    """The preferences resolved against the share's types (``share_types``, the names
    of those it has a limit for) and plans, and an admin's reason to let them into a
    certified-only share (the certified-only rule applied when there is none)."""
    resolved = (
        _resolve_preferences(
            errors, preferences, count, share_types, kind=kind, share_plans=share_plans
        )
        if "preferences" not in errors.fields()
        else []
    )
    override = _check_override(errors, actor, share_obj, certification_override)
    # The certified-only rule judges a list that parsed, of a workload that exists.
    unjudged = errors.fields() & {"preferences", "count", "workload"}
    if share_obj.certified_only and not override and not unjudged:
        template_services.check_certified(
            errors,
            share_name=share_obj.name,
            workload=workload_obj,
            resolved=resolved,
            now=now,
        )
    return resolved, override


def _check_submit_priority(
    errors: Errors, actor: AnyUser, reads: share_selectors.SubmissionReads, priority: Any
) -> None:
    """The priority is in range, and within the submitter's bands or an exception's."""
    if _check_priority_range(errors, priority):
        refusal = priority_refusal(
            user=actor,
            team_id=reads.share.team_id,
            priority=priority,
            share_id=reads.share.pk,
            team_role=reads.role,
            bands=reads.bands,
        )
        if refusal:
            errors.add("priority", refusal)


def _check_program(errors: Errors, share_obj: Share, program: Any) -> dict[str, Any]:
    """The program to run, cleaned; required on a queue that runs jobs on Slurm."""
    clean_program = slurm_services.clean_program(program, errors)
    if (
        share_obj.queue.executor == Executor.SLURM
        and not clean_program
        and "program" not in errors.fields()
    ):
        errors.add(
            "program",
            f"Queue {share_obj.queue.name} runs jobs on Slurm: say what to run, "
            '{"command": ["prog", "arg"...]} or {"script": "#!/bin/bash..."}.',
        )
    return clean_program


def _submission_rows(
    actor: AnyUser,
    job: Job,
    share_obj: Share,
    expansion: template_services.Expansion | None,
    now: datetime,
) -> tuple[JobEvent, list[AuditEntry]]:
    """The new job's ``submitted`` event and its audit entries (the submission, and the
    certification override when there is one), not yet written."""
    prefs_text = ", ".join(preference_text(p) for p in job.preferences)
    submitted = JobEvent(
        job=job,
        at=now,
        type="submitted",
        message=f"Submitted by {_actor_name(actor)} to {share_obj} with priority "
        f"{job.priority}; preferences: {prefs_text}." + _template_words(job.workload, expansion),
        data={"priority": job.priority},
    )
    entries = [
        audit.job_entry(
            event_type=AuditEvent.JOB_SUBMITTED,
            actor=actor,
            job=job,
            before=None,
            after=job_snapshot(job),
            at=now,
        )
    ]
    if job.certification_override:
        entries.append(
            audit.job_entry(
                event_type=AuditEvent.JOB_CERTIFICATION_OVERRIDDEN,
                actor=actor,
                job=job,
                before=None,
                after={"preferences": job.preferences, "workload": job.workload_id},
                reason=job.certification_override,
                at=now,
            )
        )
    return submitted, entries


OVERRIDE_MAX_LENGTH = 500


def _check_override(errors: Errors, actor: AnyUser, share: Share, reason: Any) -> str:
    """An admin's reason to let a job into a certified-only share with preferences that
    are not certified (docs/workloads.md#certified-only-shares); "" when none is given."""
    if reason is None or reason == "":
        return ""
    clean = reason.strip() if isinstance(reason, str) else ""
    if not clean or len(clean) > OVERRIDE_MAX_LENGTH:
        errors.add(
            "certification_override",
            f"Give the reason for the override as text, at most {OVERRIDE_MAX_LENGTH} characters.",
        )
        return ""
    if not roles.is_admin(actor):
        errors.add(
            "certification_override", "Only admins may override a certified-only share's rule."
        )
        return ""
    if not share.certified_only:
        errors.add(
            "certification_override",
            f"Share {share.name} is not certified-only: there is no rule to override.",
        )
        return ""
    return clean


def _template_words(workload: Any, expansion: template_services.Expansion | None) -> str:
    """The ``submitted`` event's words about a template the job took."""
    if expansion is None:
        return ""
    words = f" Preferences from workload {workload.name}'s template."
    return words + "".join(f" {w}" for w in expansion.warnings)


def may_manage(actor: AnyUser, job: Job) -> bool:
    """The submitter, the leads of the job's team and admins may cancel or reprioritise."""
    if roles.is_admin(actor):
        return True
    if actor.is_authenticated and job.submitter_id == actor.pk:
        return True
    return roles.is_lead_of(actor, job.share.team_id)


def job_cancel(*, actor: AnyUser, job: Job | int, reason: str = "") -> Job:
    """Cancel a pending or running job (its submitter, its team's leads, admins)."""
    with transaction.atomic():
        locked = lock_job(job, "share", "share__team", "queue")
        if not may_manage(actor, locked):
            raise PermissionDenied(
                {"detail": ["Only the submitter, the team's leads and admins may cancel a job."]}
            )
        if locked.state not in ACTIVE_STATES:
            raise ValidationFailed(
                {
                    "state": [
                        "Only pending or running jobs can be cancelled; "
                        f"this one is {locked.state}."
                    ]
                }
            )
        before = job_snapshot(locked)
        now = timezone.now()
        was = locked.state
        locked.state = JobState.CANCELLED
        locked.finished_at = now
        if was == JobState.RUNNING and locked.agent:
            # The agent running it gets a stop order, as after a preemption.
            locked.stop_requested_run = locked.run
        locked.save(update_fields=["state", "finished_at", "stop_requested_run"])
        job_event(
            locked,
            now,
            "cancelled",
            f"Cancelled by {_actor_name(actor)} while {was.lower()}"
            + (f": {reason}" if reason else "."),
            previous_state=was,
        )
        audit.record_job(
            event_type=AuditEvent.JOB_CANCELLED,
            actor=actor,
            job=locked,
            before=before,
            after=job_snapshot(locked),
            reason=reason,
            at=now,
        )
        hooks.queue_changed(locked.queue_id)
    return locked


def apply_priority_change(
    *,
    actor: AnyUser | None,
    job: Job,
    priority: int,
    reason: str,
    message: str,
    at: datetime,
) -> None:
    """Write a (checked) priority change of a locked job: job, event, audit, cycle.

    Shared with the exception service, which raises and reverts priorities on approval,
    withdrawal and expiry.
    """
    before = job.priority
    job.priority = priority
    job.save(update_fields=["priority"])
    job_event(job, at, "reprioritised", message, before=before, after=priority)
    audit.record_job(
        event_type=AuditEvent.JOB_REPRIORITISED,
        actor=actor,
        job=job,
        before={"priority": before},
        after={"priority": priority},
        reason=reason,
        at=at,
    )
    hooks.queue_changed(job.queue_id)


def job_reprioritise(*, actor: AnyUser, job: Job | int, priority: int, reason: str = "") -> Job:
    """Change a pending or running job's priority (submitter, team leads, admins).

    The band rule of submission applies to the new priority; an approved, unexpired
    exception for the job or for its share covers a priority above the actor's bands.
    """
    with transaction.atomic():
        locked = lock_job(job, "share", "share__team", "queue")
        if not may_manage(actor, locked):
            raise PermissionDenied(
                {
                    "detail": [
                        "Only the submitter, the team's leads and admins may change a job's "
                        "priority."
                    ]
                }
            )
        errors = Errors()
        if locked.state not in ACTIVE_STATES:
            errors.add(
                "state",
                f"Only pending or running jobs can be reprioritised; this one is {locked.state}.",
            )
        if _check_priority_range(errors, priority):
            refusal = priority_refusal(
                user=actor,
                team_id=locked.share.team_id,
                priority=priority,
                share_id=locked.share_id,
                job_id=locked.pk,
            )
            if refusal:
                errors.add("priority", refusal)
        errors.raise_if_any()
        if priority == locked.priority:
            return locked
        now = timezone.now()
        apply_priority_change(
            actor=actor,
            job=locked,
            priority=priority,
            reason=reason,
            message=f"Priority changed from {locked.priority} to {priority} by "
            f"{_actor_name(actor)}" + (f": {reason}" if reason else "."),
            at=now,
        )
    return locked
