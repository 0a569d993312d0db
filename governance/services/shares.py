"""Quota shares: a team's entitlement inside one queue. Admins only.

Every edit names the ``version`` it read (optimistic locking): a stale edit is refused
with the stored values instead of silently overwriting someone else's change. Changing a
share never stops a job by itself; the scheduler's next cycles act on the new settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction

from governance.models import (
    AuditEvent,
    CapacityPlan,
    InstanceType,
    Job,
    JobQueue,
    Policy,
    PriorityException,
    QueueCapacity,
    Share,
    ShareChangeRequest,
    ShareLimit,
    Team,
)
from governance.models.jobs import ACTIVE_STATES
from governance.models.shares import MAX_LIMITS_PER_SHARE, MAX_SHARES_PER_QUEUE
from governance.roles import AnyUser
from governance.services import audit, hooks, notifications
from governance.services import limits as limits_
from governance.services.counts import write_type_counts
from governance.services.errors import (
    Conflict,
    Errors,
    NotFound,
    ValidationFailed,
)
from governance.services.kit import is_int, require_admin

SHARE_FIELDS = (
    "queue",
    "team",
    "name",
    "policy",
    "borrow_limit",
    "limits",
    "in_share_preemption",
    "preemption_retries",
    "enabled",
    "borrow_requires_verified_recovery",
    "certified_only",
)


def limits_map(share: Share) -> dict[str, int]:
    rows = ShareLimit.objects.filter(share=share).select_related("instance_type")
    return dict(sorted((row.instance_type.name, row.count) for row in rows))


def share_snapshot(share: Share) -> dict[str, Any]:
    """The share as the API shows it; used for audit before/after and for 409 bodies."""
    return audit.fields_of(
        share,
        "id",
        "queue",
        "team",
        "name",
        "policy",
        "borrow_limit",
        "in_share_preemption",
        "preemption_retries",
        "enabled",
        "borrow_requires_verified_recovery",
        "certified_only",
        "version",
        limits=limits_map(share),
    )


def _lock_queue(queue: JobQueue | int | None) -> JobQueue:
    if queue is None:
        raise ValidationFailed({"queue": ["Choose the queue of the share."]})
    queue_id = queue.pk if isinstance(queue, JobQueue) else queue
    locked = (
        JobQueue.objects.select_for_update().filter(pk=queue_id).first()
        if limits_.valid_id(queue_id)
        else None
    )
    if locked is None:
        raise ValidationFailed({"queue": ["No such queue."]})
    return locked


def _validate(
    values: dict[str, Any], queue: JobQueue, errors: Errors, *, share_pk: int | None
) -> dict[InstanceType, int]:
    """Check a share's full set of values against the rules; returns the parsed limits.

    Long because it is the flat list of a share's field rules, each independent, in the
    order they are reported."""
    name = values["name"]
    if not isinstance(name, str) or not name.strip():
        errors.add("name", "A share needs a name.")
    else:
        values["name"] = name = name.strip()
        if len(name) > 100:
            errors.add("name", "At most 100 characters.")
        clash = Share.objects.filter(queue=queue, name=name)
        if share_pk is not None:
            clash = clash.exclude(pk=share_pk)
        if clash.exists():
            errors.add("name", f"Queue {queue.name!r} already has a share named {name!r}.")

    if not isinstance(values["team"], Team):
        errors.add("team", "No such team.")

    policy = values["policy"]
    if policy not in Policy.values:
        errors.add("policy", f"Must be one of: {', '.join(Policy.values)}.")

    borrow_limit = values["borrow_limit"]
    if policy == Policy.LEND_AND_BORROW:
        if not is_int(borrow_limit) or not -1 <= borrow_limit <= limits_.MAX_BORROW_PERCENT:
            errors.add(
                "borrow_limit",
                f"Must be -1 (unlimited) or a percent from 0 to {limits_.MAX_BORROW_PERCENT} "
                "of each limit (200 = up to twice the limit on top).",
            )
    elif borrow_limit is not None and policy in Policy.values:
        errors.add(
            "borrow_limit",
            f"Only a LEND_AND_BORROW share has a borrow limit; leave it empty for {policy}.",
        )

    retries = values["preemption_retries"]
    if retries is not None and (not is_int(retries) or not 0 <= retries <= limits_.MAX_RETRIES):
        errors.add(
            "preemption_retries",
            f"Must be empty (unlimited) or an integer >= 0 (at most {limits_.MAX_RETRIES}).",
        )

    for flag in (
        "in_share_preemption",
        "enabled",
        "borrow_requires_verified_recovery",
        "certified_only",
    ):
        if not isinstance(values[flag], bool):
            errors.add(flag, "Must be true or false.")

    limits = values["limits"]
    clean: dict[InstanceType, int] = {}
    if not isinstance(limits, dict):
        errors.add("limits", 'Give a map of instance type to count, e.g. {"ml.g5.xlarge": 2}.')
        return clean
    if not 1 <= len(limits) <= MAX_LIMITS_PER_SHARE:
        errors.add(
            "limits", f"A share has 1 to {MAX_LIMITS_PER_SHARE} limits; {len(limits)} given."
        )
    capacity = {
        row.instance_type.name: row.instance_type
        for row in QueueCapacity.objects.filter(queue=queue).select_related("instance_type")
    }
    for type_name, count in limits.items():
        if type_name not in capacity:
            errors.add(
                "limits",
                f"{type_name}: queue {queue.name!r} has no capacity for this type "
                f"(it has: {', '.join(sorted(capacity)) or 'none'}).",
            )
        elif not is_int(count) or not 0 <= count <= limits_.MAX_INSTANCES:
            errors.add(
                "limits",
                f"{type_name}: the limit must be an integer from 0 to {limits_.MAX_INSTANCES}.",
            )
        else:
            clean[capacity[type_name]] = count
    return clean


def share_create(
    *,
    actor: AnyUser,
    queue: JobQueue | int,
    team: Team | int,
    name: str,
    limits: Mapping[str, int],
    policy: str = Policy.RESERVE,
    borrow_limit: int | None = None,
    in_share_preemption: bool = False,
    preemption_retries: int | None = None,
    enabled: bool = True,
    borrow_requires_verified_recovery: bool = False,
    certified_only: bool = False,
    reason: str = "",
) -> Share:
    """Create a share (version 1). A LEND_AND_BORROW share without a borrow limit gets -1."""
    require_admin(actor, "create shares")
    errors = Errors()
    with transaction.atomic():
        locked_queue = _lock_queue(queue)
        if Share.objects.filter(queue=locked_queue).count() >= MAX_SHARES_PER_QUEUE:
            errors.add(
                "queue",
                f"Queue {locked_queue.name!r} already has {MAX_SHARES_PER_QUEUE} shares, "
                "the most a queue may have.",
            )
        team_obj = team if isinstance(team, Team) else Team.objects.filter(pk=team).first()
        if policy == Policy.LEND_AND_BORROW and borrow_limit is None:  # documented default
            borrow_limit = -1
        values: dict[str, Any] = {
            "name": name,
            "team": team_obj,
            "policy": policy,
            "borrow_limit": borrow_limit,
            "limits": dict(limits) if isinstance(limits, Mapping) else limits,
            "in_share_preemption": in_share_preemption,
            "preemption_retries": preemption_retries,
            "enabled": enabled,
            "borrow_requires_verified_recovery": borrow_requires_verified_recovery,
            "certified_only": certified_only,
        }
        clean_limits = _validate(values, locked_queue, errors, share_pk=None)
        errors.raise_if_any()
        fields = {k: v for k, v in values.items() if k != "limits"}
        try:
            with transaction.atomic():
                share = Share.objects.create(queue=locked_queue, **fields)
        except IntegrityError as exc:
            raise ValidationFailed({"name": ["A share with this name exists."]}) from exc
        write_type_counts(ShareLimit, "share", share, clean_limits)
        audit.record(
            event_type=AuditEvent.SHARE_CREATED,
            actor=actor,
            subject=share,
            after=share_snapshot(share),
            reason=reason,
            team_id=share.team_id,
            share_id=share.pk,
            queue_id=share.queue_id,
        )
        notifications.share_changed(share, actor, reason, what="created")
        hooks.queue_changed(share.queue_id)
    return share


def _merged_values(
    share: Share, limits: dict[str, int], changes: Mapping[str, Any], errors: Errors
) -> dict[str, Any]:
    """The share's values with ``changes`` applied, as ``_validate`` checks them.

    Leaving LEND_AND_BORROW drops the borrow limit; moving to it without one gives -1.
    """
    if "queue" in changes:
        new_queue = changes["queue"]
        new_queue_id = new_queue.pk if isinstance(new_queue, JobQueue) else new_queue
        if new_queue_id != share.queue_id:
            errors.add(
                "queue", "A share cannot move to another queue; create a share there instead."
            )
    values: dict[str, Any] = {
        "name": share.name,
        "team": share.team,
        "policy": share.policy,
        "borrow_limit": share.borrow_limit,
        "limits": limits,
        "in_share_preemption": share.in_share_preemption,
        "preemption_retries": share.preemption_retries,
        "enabled": share.enabled,
        "borrow_requires_verified_recovery": share.borrow_requires_verified_recovery,
        "certified_only": share.certified_only,
    }
    for field in SHARE_FIELDS:
        if field in changes and field != "queue":
            values[field] = changes[field]
    if "team" in changes and not isinstance(changes["team"], Team):
        values["team"] = Team.objects.filter(pk=changes["team"]).first()
    if values["policy"] == Policy.LEND_AND_BORROW and values["borrow_limit"] is None:
        values["borrow_limit"] = -1  # the documented default: unlimited
    elif values["policy"] != Policy.LEND_AND_BORROW and "borrow_limit" not in changes:
        values["borrow_limit"] = None  # leaving LEND_AND_BORROW drops its borrow limit
    return values


def validate_share_fields(share: Share, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Check proposed ``changes`` to ``share`` without writing anything (share preview).

    Returns the share's values as they would be after the change, ``limits`` as a map of
    type name to count; raises ValidationFailed naming the fields, as ``share_update``.
    """
    unknown = set(changes) - set(SHARE_FIELDS) - {"version", "reason"}
    if unknown:
        raise ValidationFailed({field: ["Unknown field."] for field in sorted(unknown)})
    errors = Errors()
    values = _merged_values(share, limits_map(share), changes, errors)
    clean_limits = _validate(values, share.queue, errors, share_pk=share.pk)
    errors.raise_if_any()
    values["limits"] = {itype.name: count for itype, count in clean_limits.items()}
    return values


def share_update(
    *,
    actor: AnyUser,
    share: Share | int,
    version: int | None,
    changes: Mapping[str, Any],
    reason: str = "",
) -> Share:
    """Apply ``changes`` to a share read at ``version``; the version then goes up by one.

    ``limits`` replaces the whole map. Leaving LEND_AND_BORROW clears the borrow limit;
    moving to it without one gives -1 (unlimited). A share cannot move to another queue.
    A stale ``version`` raises Conflict carrying the stored share.
    """
    require_admin(actor, "change shares")
    unknown = set(changes) - set(SHARE_FIELDS)
    if unknown:
        raise ValidationFailed({field: ["Unknown field."] for field in sorted(unknown)})
    if not is_int(version):
        raise ValidationFailed(
            {"version": ["Send the version you read, so a concurrent change is not lost."]}
        )
    share_id = share if isinstance(share, int) else share.pk
    errors = Errors()
    with transaction.atomic():
        queue_id = Share.objects.filter(pk=share_id).values_list("queue_id", flat=True).first()
        if queue_id is None:
            raise NotFound({"detail": ["No such share."]})
        # Lock order: queue, then share (as queue_update and share_create do).
        locked_queue = _lock_queue(queue_id)
        locked = Share.objects.select_for_update().get(pk=share_id)
        before = share_snapshot(locked)
        if locked.version != version:
            raise Conflict(
                {
                    "version": [
                        f"This share was changed by someone else: you sent version {version}, "
                        f"the current version is {locked.version}. Review the current values "
                        "and send your change again with the current version."
                    ]
                },
                current=before,
            )
        values = _merged_values(locked, before["limits"], changes, errors)
        clean_limits = _validate(values, locked_queue, errors, share_pk=locked.pk)
        errors.raise_if_any()

        for field, value in values.items():
            if field != "limits":
                setattr(locked, field, value)
        write_type_counts(ShareLimit, "share", locked, clean_limits)
        after_candidate = {**share_snapshot(locked), "limits": limits_map(locked)}
        if audit.unchanged(before, after_candidate):
            return locked  # nothing changed: no new version, no audit entry
        locked.version += 1
        try:
            with transaction.atomic():
                locked.save()
        except IntegrityError as exc:
            raise ValidationFailed({"name": ["A share with this name exists."]}) from exc
        after = share_snapshot(locked)
        audit.record(
            event_type=AuditEvent.SHARE_UPDATED,
            actor=actor,
            subject=locked,
            before=before,
            after=after,
            reason=reason,
            team_id=locked.team_id,
            share_id=locked.pk,
            queue_id=locked.queue_id,
        )
        notifications.share_changed(locked, actor, reason)
        hooks.queue_changed(locked.queue_id)
    return locked


def share_delete(*, actor: AnyUser, share: Share | int, reason: str = "") -> None:
    """Delete a share that never had jobs, exceptions, change requests or capacity plans.

    Finished jobs keep pointing at their share (their history and accounting need it),
    and exceptions are part of the review trail, so a share that has any is refused:
    disable it instead (``enabled: false``), which stops new work without losing history.
    """
    require_admin(actor, "delete shares")
    share_id = share if isinstance(share, int) else share.pk
    with transaction.atomic():
        queue_id = Share.objects.filter(pk=share_id).values_list("queue_id", flat=True).first()
        if queue_id is None:
            raise NotFound({"detail": ["No such share."]})
        _lock_queue(queue_id)
        locked = Share.objects.select_for_update().get(pk=share_id)
        active = Job.objects.filter(share=locked, state__in=ACTIVE_STATES).count()
        if active:
            raise ValidationFailed(
                {
                    "share": [
                        f"Share {locked.name!r} has {active} pending or running job(s). "
                        "Disable the share (enabled: false) instead of deleting it."
                    ]
                }
            )
        if Job.objects.filter(share=locked).exists():
            raise ValidationFailed(
                {
                    "share": [
                        f"Share {locked.name!r} has finished jobs whose history refers to it. "
                        "Disable the share (enabled: false) instead of deleting it."
                    ]
                }
            )
        if CapacityPlan.objects.filter(share=locked).exists():
            raise ValidationFailed(
                {
                    "share": [
                        f"Share {locked.name!r} has capacity plans on record (their history "
                        "and cost refer to it). Disable the share (enabled: false) instead "
                        "of deleting it."
                    ]
                }
            )
        if ShareChangeRequest.objects.filter(share=locked).exists():
            raise ValidationFailed(
                {
                    "share": [
                        f"Share {locked.name!r} has change requests on record. "
                        "Disable the share (enabled: false) instead of deleting it."
                    ]
                }
            )
        if PriorityException.objects.filter(share=locked).exists():
            raise ValidationFailed(
                {
                    "share": [
                        f"Share {locked.name!r} has priority exceptions on record. "
                        "Disable the share (enabled: false) instead of deleting it."
                    ]
                }
            )
        before = share_snapshot(locked)
        audit.record(
            event_type=AuditEvent.SHARE_DELETED,
            actor=actor,
            subject=locked,
            before=before,
            reason=reason,
            team_id=locked.team_id,
            share_id=locked.pk,
            queue_id=locked.queue_id,
        )
        notifications.share_changed(locked, actor, reason, what="deleted")
        locked.delete()
        hooks.queue_changed(queue_id)
