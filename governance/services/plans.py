"""Capacity plans (docs/scheduling.md#capacity-plans): admins create, resize and end them.

Each function validates its whole input (errors keyed by the field, naming the rule),
writes the plan and its audit entry in one transaction, and asks for a scheduling cycle
of the plan's queue: a new plan, a changed count or an early end changes what the
scheduler may place (a drop below the plan's usage stops jobs on it as
``capacity_lost``; an end stops them as ``plan_ended``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from django.db import IntegrityError, transaction
from django.utils import timezone

from governance.models import AuditEvent, CapacityPlan, InstanceType, JobQueue, PlanState, Share
from governance.roles import AnyUser
from governance.services import audit, hooks, limits
from governance.services.errors import Errors, NotFound, ValidationFailed
from governance.services.kit import require_admin

NAME_MAX_LENGTH = 100
REASON_MAX_LENGTH = limits.MAX_REASON
# The longest a plan may run: a plan is bought for weeks or months, never for decades.
MAX_PLAN_DAYS = 5 * 366
MAX_PRICE = Decimal("1000000")


def plan_snapshot(plan: CapacityPlan) -> dict[str, Any]:
    """The plan's API fields as JSON, for audit ``before``/``after``."""
    return audit.fields_of(
        plan,
        "id",
        "queue",
        "share",
        "name",
        "count",
        "start",
        "end",
        "ended_at",
        instance_type=plan.instance_type.name,
        hourly_price=str(Decimal(plan.hourly_price).quantize(Decimal("0.0001"))),
    )


def _clean_count(errors: Errors, count: Any) -> int:
    limits.check_int(errors, "count", count, minimum=0, maximum=limits.MAX_INSTANCES)
    return count if limits.is_int(count) else 0


def _clean_reason(errors: Errors, reason: Any, *, required: bool) -> str:
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        errors.add("reason", "The reason must be text.")
        return ""
    reason = reason.strip()
    if required and not reason:
        errors.add("reason", "Say why: the reason goes to the audit trail.")
    elif len(reason) > REASON_MAX_LENGTH:
        errors.add("reason", f"At most {REASON_MAX_LENGTH} characters.")
    return reason


def _clean_moment(errors: Errors, field: str, value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        errors.add(field, f"The {field} must be a date and time, e.g. 2026-12-01T09:00:00Z.")
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_current_timezone())
    if not 2000 <= value.year <= 9000:
        errors.add(field, f"The {field} must be between the years 2000 and 9000.")
        return None
    return value


def _clean_price(errors: Errors, value: Any) -> Decimal:
    try:
        price = Decimal(str(value))
        if isinstance(value, bool) or not price.is_finite() or price < 0:
            raise InvalidOperation
    except (InvalidOperation, ValueError):
        errors.add("hourly_price", "The price must be a number of 0 or more (per instance-hour).")
        return Decimal(0)
    if price >= MAX_PRICE:
        errors.add("hourly_price", f"The price must be below {MAX_PRICE} per instance-hour.")
    return price.quantize(Decimal("0.0001"))


def _plan_owner(
    errors: Errors, queue_id: Any, share_id: Any
) -> tuple[JobQueue | None, Share | None]:
    """The plan's queue (locked) and share, which must be a share of that queue."""
    queue_obj = (
        JobQueue.objects.select_for_update().filter(pk=cast(int, queue_id)).first()
        if limits.valid_id(queue_id)
        else None
    )
    if queue_obj is None:
        errors.add("queue", f"No queue with id {queue_id}.")
    share_obj = (
        Share.objects.select_related("team").filter(pk=cast(int, share_id)).first()
        if limits.valid_id(share_id)
        else None
    )
    if share_obj is None:
        errors.add("share", f"No share with id {share_id}.")
    elif queue_obj is not None and share_obj.queue_id != queue_obj.pk:
        errors.add(
            "share",
            f"Share {share_obj.name!r} belongs to another queue; a plan serves a share "
            f"of queue {queue_obj.name!r}.",
        )
    return queue_obj, share_obj


def _clean_plan_name(errors: Errors, name: Any, queue_obj: JobQueue | None) -> str:
    """A plan's name: given, bounded, and unique in its queue."""
    clean_name = name.strip() if isinstance(name, str) else ""
    if not clean_name:
        errors.add("name", "A plan needs a name, e.g. vision-december.")
    elif len(clean_name) > NAME_MAX_LENGTH:
        errors.add("name", f"At most {NAME_MAX_LENGTH} characters.")
    elif queue_obj is not None and (
        CapacityPlan.objects.filter(queue=queue_obj, name=clean_name).exists()
    ):
        errors.add("name", f"Queue {queue_obj.name!r} already has a plan named {clean_name!r}.")
    return clean_name


def plan_create(
    *,
    actor: AnyUser,
    queue: JobQueue | int | None,
    share: Share | int | None,
    name: str,
    instance_type: str | None,
    count: int,
    start: datetime | None,
    end: datetime | None,
    hourly_price: Decimal | float | str | None = None,
    reason: str = "",
) -> CapacityPlan:
    """Create a plan for ``share`` in ``queue`` (admins). Audited as PLAN_CREATED.

    The share must belong to the queue and the type must exist; the name is unique in
    the queue; ``end`` must lie after ``start`` and in the future, at most
    ``MAX_PLAN_DAYS`` after ``start``. ``hourly_price`` (per instance-hour) defaults
    to 0, as in the scenario format.
    """
    require_admin(actor, "create capacity plans")
    errors = Errors()
    queue_id = queue.pk if isinstance(queue, JobQueue) else queue
    share_id = share.pk if isinstance(share, Share) else share
    with transaction.atomic():
        queue_obj, share_obj = _plan_owner(errors, queue_id, share_id)
        clean_name = _clean_plan_name(errors, name, queue_obj)
        itype = (
            InstanceType.objects.filter(name=instance_type).first()
            if isinstance(instance_type, str) and instance_type
            else None
        )
        if itype is None:
            errors.add("instance_type", f"No instance type named {instance_type!r}.")
        clean_count = _clean_count(errors, count)
        clean_start = _clean_moment(errors, "start", start)
        clean_end = _clean_moment(errors, "end", end)
        now = timezone.now()
        if clean_start is not None and clean_end is not None:
            if clean_end <= clean_start:
                errors.add("end", "The end must be after the start.")
            elif clean_end - clean_start > timedelta(days=MAX_PLAN_DAYS):
                errors.add("end", f"A plan lasts at most {MAX_PLAN_DAYS} days.")
            elif clean_end <= now:
                errors.add("end", "The end must be in the future: this plan would already be over.")
        price = _clean_price(errors, 0 if hourly_price is None else hourly_price)
        clean_reason = _clean_reason(errors, reason, required=False)
        errors.raise_if_any()
        assert queue_obj is not None and share_obj is not None and itype is not None
        assert clean_start is not None and clean_end is not None
        try:
            with transaction.atomic():
                plan = CapacityPlan.objects.create(
                    queue=queue_obj,
                    share=share_obj,
                    name=clean_name,
                    instance_type=itype,
                    count=clean_count,
                    start=clean_start,
                    end=clean_end,
                    hourly_price=price,
                    created_by=cast(Any, actor) if actor.is_authenticated else None,
                )
        except IntegrityError as exc:
            raise ValidationFailed({"name": [f"{clean_name!r} already exists."]}) from exc
        audit.record(
            event_type=AuditEvent.PLAN_CREATED,
            actor=actor,
            subject=plan,
            after=plan_snapshot(plan),
            reason=clean_reason,
            team_id=share_obj.team_id,
            share_id=share_obj.pk,
            queue_id=queue_obj.pk,
            at=now,
        )
        hooks.queue_changed(queue_obj.pk)
    return plan


def _lock_plan(plan: CapacityPlan | int) -> CapacityPlan:
    plan_id = plan.pk if isinstance(plan, CapacityPlan) else plan
    found = (
        CapacityPlan.objects.select_for_update(of=("self",))
        .select_related("queue", "share", "instance_type")
        .filter(pk=plan_id)
        .first()
        if limits.valid_id(plan_id)
        else None
    )
    if found is None:
        raise NotFound({"detail": [f"No capacity plan with id {plan_id}."]})
    return found


def plan_resize(
    *, actor: AnyUser, plan: CapacityPlan | int, count: Any, reason: Any = ""
) -> CapacityPlan:
    """Change a plan's count (admins), like a queue's capacity: a drop below what runs on
    the plan stops jobs on it (``capacity_lost``, not counted against retries) at the
    next cycle. An ended plan cannot change. Audited as PLAN_RESIZED with the reason."""
    require_admin(actor, "resize capacity plans")
    with transaction.atomic():
        locked = _lock_plan(plan)
        errors = Errors()
        now = timezone.now()
        if locked.state_at(now) is PlanState.ENDED:
            errors.add("count", f"Plan {locked.name!r} has ended; its count can no longer change.")
        clean_count = _clean_count(errors, count)
        clean_reason = _clean_reason(errors, reason, required=True)
        errors.raise_if_any()
        if clean_count == locked.count:
            return locked
        before = plan_snapshot(locked)
        locked.count = clean_count
        locked.save(update_fields=["count", "updated_at"])
        audit.record(
            event_type=AuditEvent.PLAN_RESIZED,
            actor=actor,
            subject=locked,
            before=before,
            after=plan_snapshot(locked),
            reason=clean_reason,
            team_id=locked.share.team_id,
            share_id=locked.share_id,
            queue_id=locked.queue_id,
            at=now,
        )
        hooks.queue_changed(locked.queue_id)
    return locked


def plan_end(*, actor: AnyUser, plan: CapacityPlan | int, reason: Any = "") -> CapacityPlan:
    """End an active plan now (admins): its ``end`` becomes now, and the next cycle stops
    the jobs still on it (``plan_ended``, not counted against retries); they return to
    pending and may start on their other preferences. An upcoming plan cannot be ended
    (resize it to 0 instead), nor an ended one. Audited as PLAN_ENDED with the reason."""
    require_admin(actor, "end capacity plans")
    with transaction.atomic():
        locked = _lock_plan(plan)
        errors = Errors()
        now = timezone.now()
        state = locked.state_at(now)
        if state is PlanState.ENDED:
            errors.add("end", f"Plan {locked.name!r} has already ended.")
        elif state is PlanState.UPCOMING:
            errors.add(
                "end",
                f"Plan {locked.name!r} has not started yet; resize it to 0 instances instead.",
            )
        clean_reason = _clean_reason(errors, reason, required=True)
        errors.raise_if_any()
        before = plan_snapshot(locked)
        locked.end = now
        locked.ended_at = now
        locked.save(update_fields=["end", "ended_at", "updated_at"])
        audit.record(
            event_type=AuditEvent.PLAN_ENDED,
            actor=actor,
            subject=locked,
            before=before,
            after=plan_snapshot(locked),
            reason=clean_reason,
            team_id=locked.share.team_id,
            share_id=locked.share_id,
            queue_id=locked.queue_id,
            at=now,
        )
        hooks.queue_changed(locked.queue_id)
    return locked


def plan_update(
    *, actor: AnyUser, plan: CapacityPlan | int, changes: Mapping[str, Any]
) -> CapacityPlan:
    """The API's PATCH: ``count`` (with ``reason``) resizes; nothing else may change."""
    require_admin(actor, "change capacity plans")
    unknown = sorted(set(changes) - {"count", "reason"})
    if unknown:
        raise ValidationFailed(
            {
                field: [
                    "Only count can change (with a reason); end a plan with its end action, "
                    "or create a new one."
                ]
                for field in unknown
            }
        )
    if "count" not in changes:
        raise ValidationFailed({"count": ["Give the new count."]})
    return plan_resize(
        actor=actor, plan=plan, count=changes["count"], reason=changes.get("reason", "")
    )
