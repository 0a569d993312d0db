"""Priority definitions: org-wide bands of priority values. Admins only.

Bands never overlap, so a priority value means one thing across every queue. Writers take
a table lock (SHARE ROW EXCLUSIVE: conflicts with itself, not with readers) before the
overlap check, so two concurrent creates cannot both pass it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction

from governance.models import AuditEvent, PriorityDefinition
from governance.models.priorities import MAX_PRIORITY, MIN_PRIORITY, NAME_MAX_LENGTH, BandRole
from governance.roles import AnyUser
from governance.services import audit
from governance.services.errors import Errors, NotFound, ValidationFailed
from governance.services.kit import is_int, require_admin

DEFINITION_FIELDS = (
    "name",
    "min_priority",
    "max_priority",
    "criteria",
    "usable_by",
    "exception_owner",
)


def _lock_bands() -> None:
    table = connection.ops.quote_name(PriorityDefinition._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")


def definition_snapshot(definition: PriorityDefinition) -> dict[str, Any]:
    owner = definition.exception_owner
    return audit.fields_of(
        definition,
        "id",
        "name",
        "min_priority",
        "max_priority",
        "criteria",
        usable_by=list(definition.usable_by),
        exception_owner=owner.get_username() if owner is not None else None,
    )


def _validate(values: dict[str, Any], errors: Errors, *, exclude_pk: int | None) -> Any:
    """Check a band's full values; returns the exception owner user (or None)."""
    name = values["name"]
    if not isinstance(name, str) or not name.strip():
        errors.add("name", "A priority definition needs a name.")
    else:
        values["name"] = name = name.strip()
        if len(name) > NAME_MAX_LENGTH:
            errors.add("name", f"At most {NAME_MAX_LENGTH} characters.")
        clash = PriorityDefinition.objects.filter(name__iexact=name)
        if exclude_pk is not None:
            clash = clash.exclude(pk=exclude_pk)
        if clash.exists():
            errors.add("name", f"A priority definition named {name!r} already exists.")

    low, high = values["min_priority"], values["max_priority"]
    bounds_ok = True
    for field, value in (("min_priority", low), ("max_priority", high)):
        if not is_int(value) or not MIN_PRIORITY <= value <= MAX_PRIORITY:
            errors.add(field, f"Must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}.")
            bounds_ok = False
    if bounds_ok and low > high:
        errors.add("max_priority", f"Must be at least the lowest priority of the band ({low}).")
        bounds_ok = False
    if bounds_ok:
        overlapping = PriorityDefinition.objects.filter(
            min_priority__lte=high, max_priority__gte=low
        ).order_by("min_priority")
        if exclude_pk is not None:
            overlapping = overlapping.exclude(pk=exclude_pk)
        for other in overlapping:
            message = (
                f"{low}-{high} overlaps band {other.name!r} "
                f"({other.min_priority}-{other.max_priority}); bands may not overlap."
            )
            errors.add("min_priority", message)
            errors.add("max_priority", message)

    if not isinstance(values["criteria"], str):
        errors.add("criteria", "Must be text.")

    usable_by = values["usable_by"]
    if not isinstance(usable_by, list | tuple) or not all(isinstance(r, str) for r in usable_by):
        errors.add("usable_by", f"Give a list of roles from: {', '.join(BandRole.values)}.")
    else:
        bad = [role for role in usable_by if role not in BandRole.values]
        if bad:
            errors.add(
                "usable_by",
                f"Unknown role(s) {', '.join(bad)}; roles are: {', '.join(BandRole.values)}.",
            )
        # Keep the canonical order so snapshots compare equal whatever order was sent.
        values["usable_by"] = [role for role in BandRole.values if role in usable_by]

    owner = values["exception_owner"]
    if owner is None or owner == "":
        return None
    if not isinstance(owner, str):
        errors.add("exception_owner", "Give a username.")
        return None
    user = get_user_model().objects.filter(username=owner).first()
    if user is None:
        errors.add("exception_owner", f"Unknown user {owner!r}.")
    return user


def priority_definition_create(
    *,
    actor: AnyUser,
    name: str,
    min_priority: int,
    max_priority: int,
    criteria: str = "",
    usable_by: Iterable[str] = (),
    exception_owner: str | None = None,
) -> PriorityDefinition:
    """Create a band; it may not overlap another. Audited as PRIORITY_DEFINITION_CREATED."""
    require_admin(actor, "create priority definitions")
    errors = Errors()
    values: dict[str, Any] = {
        "name": name,
        "min_priority": min_priority,
        "max_priority": max_priority,
        "criteria": criteria if criteria is not None else "",
        # Anything but a list or tuple is kept as given, for _validate to name the field.
        "usable_by": list(usable_by) if isinstance(usable_by, list | tuple) else usable_by,
        "exception_owner": exception_owner,
    }
    with transaction.atomic():
        _lock_bands()
        owner = _validate(values, errors, exclude_pk=None)
        errors.raise_if_any()
        try:
            with transaction.atomic():
                definition = PriorityDefinition.objects.create(
                    name=values["name"],
                    min_priority=values["min_priority"],
                    max_priority=values["max_priority"],
                    criteria=values["criteria"],
                    usable_by=values["usable_by"],
                    exception_owner=owner,
                )
        except IntegrityError as exc:
            raise ValidationFailed({"name": ["This name is taken."]}) from exc
        audit.record(
            event_type=AuditEvent.PRIORITY_DEFINITION_CREATED,
            actor=actor,
            subject=definition,
            after=definition_snapshot(definition),
        )
    return definition


def priority_definition_update(
    *,
    actor: AnyUser,
    definition: PriorityDefinition | int,
    changes: Mapping[str, Any],
    reason: str = "",
) -> PriorityDefinition:
    """Change a band; the result may not overlap another. PRIORITY_DEFINITION_UPDATED."""
    require_admin(actor, "change priority definitions")
    unknown = set(changes) - set(DEFINITION_FIELDS)
    if unknown:
        raise ValidationFailed({field: ["Unknown field."] for field in sorted(unknown)})
    definition_id = definition if isinstance(definition, int) else definition.pk
    errors = Errors()
    with transaction.atomic():
        _lock_bands()
        locked = (
            PriorityDefinition.objects.select_related("exception_owner")
            .filter(pk=definition_id)
            .first()
        )
        if locked is None:
            raise NotFound({"detail": ["No such priority definition."]})
        before = definition_snapshot(locked)
        values = {field: before[field] for field in DEFINITION_FIELDS}
        values.update({k: v for k, v in changes.items()})
        if values["criteria"] is None:
            values["criteria"] = ""
        owner = _validate(values, errors, exclude_pk=locked.pk)
        errors.raise_if_any()
        locked.name = values["name"]
        locked.min_priority = values["min_priority"]
        locked.max_priority = values["max_priority"]
        locked.criteria = values["criteria"]
        locked.usable_by = values["usable_by"]
        locked.exception_owner = owner
        after = definition_snapshot(locked)
        if audit.unchanged(before, after):
            return locked
        try:
            with transaction.atomic():
                locked.save()
        except IntegrityError as exc:
            raise ValidationFailed({"name": ["This name is taken."]}) from exc
        audit.record(
            event_type=AuditEvent.PRIORITY_DEFINITION_UPDATED,
            actor=actor,
            subject=locked,
            before=before,
            after=after,
            reason=reason,
        )
    return locked


def priority_definition_delete(
    *, actor: AnyUser, definition: PriorityDefinition | int, reason: str = ""
) -> None:
    """Delete a band. Jobs keep their numeric priority; it just no longer has a band."""
    require_admin(actor, "delete priority definitions")
    definition_id = definition if isinstance(definition, int) else definition.pk
    with transaction.atomic():
        _lock_bands()
        locked = (
            PriorityDefinition.objects.select_related("exception_owner")
            .filter(pk=definition_id)
            .first()
        )
        if locked is None:
            raise NotFound({"detail": ["No such priority definition."]})
        audit.record(
            event_type=AuditEvent.PRIORITY_DEFINITION_DELETED,
            actor=actor,
            subject=locked,
            before=definition_snapshot(locked),
            reason=reason,
        )
        locked.delete()
