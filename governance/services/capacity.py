"""Instance types and job queues with their capacity per type. Admins only.

An instance type's ``name`` cannot change once created: jobs keep their preference lists
as type names, so a rename would silently re-point history. Create a new type instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction

from governance.models import AuditEvent, InstanceType, JobQueue, QueueCapacity, ShareLimit
from governance.models.capacity import Executor
from governance.roles import AnyUser
from governance.services import audit, hooks
from governance.services import limits as limits_
from governance.services.counts import write_type_counts
from governance.services.errors import Errors, NotFound, ValidationFailed
from governance.services.kit import is_int, require_admin
from scheduler.engine.model import default_accelerated

INSTANCE_TYPE_FIELDS = ("name", "accelerated", "accelerators", "speed", "hourly_price")
QUEUE_FIELDS = ("name", "description", "executor", "capacity")


# --- instance types ---------------------------------------------------------------------


def instance_type_snapshot(itype: InstanceType) -> dict[str, Any]:
    return audit.fields_of(
        itype,
        "id",
        "name",
        "accelerated",
        "accelerators",
        speed=float(itype.speed),
        hourly_price=str(Decimal(itype.hourly_price).quantize(Decimal("0.0001"))),
    )


def _clean_type_fields(values: Mapping[str, Any], errors: Errors) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    if "accelerated" in values:
        if not isinstance(values["accelerated"], bool):
            errors.add("accelerated", "Must be true or false.")
        clean["accelerated"] = values["accelerated"]
    if "accelerators" in values:
        value = values["accelerators"]
        if not is_int(value) or not 0 <= value <= limits_.MAX_ACCELERATORS:
            errors.add("accelerators", f"Must be an integer from 0 to {limits_.MAX_ACCELERATORS}.")
        clean["accelerators"] = value
    if "speed" in values:
        value = values["speed"]
        if (
            not isinstance(value, int | float | Decimal)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or not 0 < value <= limits_.MAX_SPEED
        ):
            errors.add(
                "speed",
                f"Must be a number > 0 and at most {limits_.MAX_SPEED} "
                "(1.0 is the reference speed).",
            )
        clean["speed"] = value
    if "hourly_price" in values:
        value = values["hourly_price"]
        try:
            price = Decimal(str(value))
            if isinstance(value, bool) or not price.is_finite() or price < 0:
                raise InvalidOperation
            if price >= Decimal("1000000"):
                errors.add("hourly_price", "Must be below 1000000.")
            clean["hourly_price"] = price.quantize(Decimal("0.0001"))
        except (InvalidOperation, ValueError):
            errors.add("hourly_price", "Must be a number >= 0.")
    return clean


def instance_type_create(
    *,
    actor: AnyUser,
    name: str,
    accelerated: bool | None = None,
    accelerators: int = 0,
    speed: float = 1.0,
    hourly_price: Decimal | float | str = 0,
    reason: str = "",
) -> InstanceType:
    """Create an instance type; ``accelerated`` defaults from the family (ml.p/ml.g/ml.trn)."""
    require_admin(actor, "create instance types")
    errors = Errors()
    clean_name = name.strip() if isinstance(name, str) else ""
    if not clean_name:
        errors.add("name", "An instance type needs a name, e.g. ml.g5.xlarge.")
    elif len(clean_name) > 64:
        errors.add("name", "At most 64 characters.")
    elif "/" in clean_name or any(ch.isspace() for ch in clean_name):
        errors.add("name", "No spaces or slashes.")
    elif InstanceType.objects.filter(name=clean_name).exists():
        errors.add("name", f"Instance type {clean_name!r} already exists.")
    if accelerated is None:
        accelerated = default_accelerated(clean_name)
    clean = _clean_type_fields(
        {
            "accelerated": accelerated,
            "accelerators": accelerators,
            "speed": speed,
            "hourly_price": hourly_price,
        },
        errors,
    )
    errors.raise_if_any()
    with transaction.atomic():
        try:
            with transaction.atomic():
                itype = InstanceType.objects.create(name=clean_name, **clean)
        except IntegrityError as exc:
            raise ValidationFailed({"name": [f"{clean_name!r} already exists."]}) from exc
        itype.refresh_from_db()
        audit.record(
            event_type=AuditEvent.INSTANCE_TYPE_CREATED,
            actor=actor,
            subject=itype,
            after=instance_type_snapshot(itype),
            reason=reason,
        )
    return itype


def instance_type_update(
    *,
    actor: AnyUser,
    instance_type: InstanceType | int,
    changes: Mapping[str, Any],
    reason: str = "",
) -> InstanceType:
    """Change an instance type's attributes (not its name). Audited as INSTANCE_TYPE_UPDATED."""
    require_admin(actor, "change instance types")
    unknown = set(changes) - set(INSTANCE_TYPE_FIELDS)
    if unknown:
        raise ValidationFailed({field: ["Unknown field."] for field in sorted(unknown)})
    type_id = instance_type if isinstance(instance_type, int) else instance_type.pk
    errors = Errors()
    with transaction.atomic():
        itype = InstanceType.objects.select_for_update().filter(pk=type_id).first()
        if itype is None:
            raise NotFound({"detail": ["No such instance type."]})
        before = instance_type_snapshot(itype)
        if "name" in changes and changes["name"] != itype.name:
            errors.add(
                "name",
                "An instance type cannot be renamed: jobs refer to it by name. "
                "Create a new type instead.",
            )
        clean = _clean_type_fields(changes, errors)
        errors.raise_if_any()
        for field, value in clean.items():
            setattr(itype, field, value)
        itype.save()
        itype.refresh_from_db()
        audit.record_change(
            event_type=AuditEvent.INSTANCE_TYPE_UPDATED,
            actor=actor,
            subject=itype,
            before=before,
            after=instance_type_snapshot(itype),
            reason=reason,
        )
    return itype


# --- queues -------------------------------------------------------------------------------


def capacity_map(queue: JobQueue) -> dict[str, int]:
    """``{type name: count}`` of a queue, sorted by type name."""
    rows = QueueCapacity.objects.filter(queue=queue).select_related("instance_type")
    return {row.instance_type.name: row.count for row in sorted(rows, key=_row_name)}


def _row_name(row: QueueCapacity) -> str:
    return row.instance_type.name


def queue_snapshot(queue: JobQueue) -> dict[str, Any]:
    return audit.fields_of(
        queue, "id", "name", "description", "executor", capacity=capacity_map(queue)
    )


def _clean_queue_name(name: Any, errors: Errors, *, exclude_pk: int | None = None) -> str:
    if not isinstance(name, str) or not name.strip():
        errors.add("name", "A queue needs a name.")
        return ""
    name = name.strip()
    if len(name) > 100:
        errors.add("name", "At most 100 characters.")
    clash = JobQueue.objects.filter(name__iexact=name)
    if exclude_pk is not None:
        clash = clash.exclude(pk=exclude_pk)
    if clash.exists():
        errors.add("name", f"A queue named {name!r} already exists.")
    return name


def _clean_executor(executor: Any, errors: Errors) -> str:
    if executor not in Executor.values:
        errors.add("executor", f"Must be one of: {', '.join(Executor.values)}.")
    return str(executor)


def _clean_capacity(capacity: Any, errors: Errors) -> dict[InstanceType, int]:
    """Check a ``{type name: count}`` map; every type must exist, every count be >= 0."""
    if not isinstance(capacity, dict):
        errors.add("capacity", 'Give a map of instance type to count, e.g. {"ml.g5.xlarge": 4}.')
        return {}
    types = {t.name: t for t in InstanceType.objects.filter(name__in=list(capacity))}
    clean: dict[InstanceType, int] = {}
    for type_name, count in capacity.items():
        if type_name not in types:
            errors.add("capacity", f"{type_name}: no such instance type.")
            continue
        if not is_int(count) or not 0 <= count <= limits_.MAX_INSTANCES:
            errors.add(
                "capacity",
                f"{type_name}: the count must be an integer from 0 to {limits_.MAX_INSTANCES}.",
            )
            continue
        clean[types[type_name]] = count
    return clean


def queue_create(
    *,
    actor: AnyUser,
    name: str,
    description: str = "",
    executor: str = Executor.SIMULATED,
    capacity: Mapping[str, int] | None = None,
    reason: str = "",
) -> JobQueue:
    """Create a queue with its capacity map. Audited as QUEUE_CREATED (capacity included)."""
    require_admin(actor, "create queues")
    errors = Errors()
    with transaction.atomic():
        clean_name = _clean_queue_name(name, errors)
        clean_executor = _clean_executor(executor, errors)
        clean_capacity = _clean_capacity({} if capacity is None else capacity, errors)
        errors.raise_if_any()
        try:
            with transaction.atomic():
                queue = JobQueue.objects.create(
                    name=clean_name, description=description or "", executor=clean_executor
                )
        except IntegrityError as exc:
            raise ValidationFailed({"name": [f"A queue named {clean_name!r} exists."]}) from exc
        write_type_counts(QueueCapacity, "queue", queue, clean_capacity)
        audit.record(
            event_type=AuditEvent.QUEUE_CREATED,
            actor=actor,
            subject=queue,
            after=queue_snapshot(queue),
            reason=reason,
            queue_id=queue.pk,
        )
        hooks.queue_changed(queue.pk)
    return queue


def _check_types_kept(
    errors: Errors,
    queue: JobQueue,
    before: Mapping[str, int],
    new_capacity: Mapping[InstanceType, int],
) -> None:
    """A type leaves the capacity map only when no share of the queue has a limit for it."""
    kept = {itype.name for itype in new_capacity}
    removed = sorted(set(before) - kept)
    if not removed:
        return
    blocking = (
        ShareLimit.objects.filter(share__queue=queue, instance_type__name__in=removed)
        .select_related("share", "instance_type")
        .order_by("instance_type__name", "share__name")
    )
    for limit in blocking:
        errors.add(
            "capacity",
            f"{limit.instance_type.name} cannot be removed: share "
            f"{limit.share.name!r} has a limit for it. Change that share's limits "
            "first, or set the capacity to 0.",
        )


def queue_update(
    *,
    actor: AnyUser,
    queue: JobQueue | int,
    changes: Mapping[str, Any],
    reason: str = "",
) -> JobQueue:
    """Change a queue's name/description/executor (QUEUE_UPDATED) and/or capacity.

    ``capacity`` replaces the whole map and is its own audited change (CAPACITY_CHANGED,
    before/after maps) that asks the scheduler for a cycle. A type cannot leave the map
    while a share of the queue still has a limit for it: set its count to 0 instead, or
    change those shares first.
    """
    require_admin(actor, "change queues")
    unknown = set(changes) - set(QUEUE_FIELDS)
    if unknown:
        raise ValidationFailed({field: ["Unknown field."] for field in sorted(unknown)})
    queue_id = queue if isinstance(queue, int) else queue.pk
    errors = Errors()
    with transaction.atomic():
        # Share services lock the queue row too before checking limits against capacity.
        locked = JobQueue.objects.select_for_update().filter(pk=queue_id).first()
        if locked is None:
            raise NotFound({"detail": ["No such queue."]})
        before = queue_snapshot(locked)
        if "name" in changes:
            locked.name = _clean_queue_name(changes["name"], errors, exclude_pk=locked.pk)
        if "description" in changes:
            locked.description = changes["description"] or ""
        if "executor" in changes:
            locked.executor = _clean_executor(changes["executor"], errors)
        new_capacity: dict[InstanceType, int] | None = None
        if "capacity" in changes:
            new_capacity = _clean_capacity(changes["capacity"], errors)
            if not errors:
                _check_types_kept(errors, locked, before["capacity"], new_capacity)
        errors.raise_if_any()

        locked.save()
        fields_before = {k: before[k] for k in ("name", "description", "executor")}
        fields_after = {
            "name": locked.name,
            "description": locked.description,
            "executor": locked.executor,
        }
        if fields_after != fields_before:
            audit.record(
                event_type=AuditEvent.QUEUE_UPDATED,
                actor=actor,
                subject=locked,
                before=fields_before,
                after=fields_after,
                reason=reason,
                queue_id=locked.pk,
            )
        if new_capacity is not None:
            write_type_counts(QueueCapacity, "queue", locked, new_capacity)
            after_capacity = capacity_map(locked)
            if after_capacity != before["capacity"]:
                audit.record(
                    event_type=AuditEvent.CAPACITY_CHANGED,
                    actor=actor,
                    subject=locked,
                    before={"capacity": before["capacity"]},
                    after={"capacity": after_capacity},
                    reason=reason,
                    queue_id=locked.pk,
                )
                hooks.queue_changed(locked.pk)
    return locked


def queue_set_capacity(
    *, actor: AnyUser, queue: JobQueue | int, capacity: Mapping[str, int], reason: str = ""
) -> JobQueue:
    """Replace a queue's capacity map (see ``queue_update``)."""
    return queue_update(actor=actor, queue=queue, changes={"capacity": capacity}, reason=reason)
