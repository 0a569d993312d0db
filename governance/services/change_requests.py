"""Share change requests: a lead proposes share settings, an admin decides (docs/admin-guide.md).

A lead of the share's team files the fields they want (limits, policy, borrow limit,
in-share preemption, retries) with a justification; the share editor's impact preview
is stored with the request. An admin approves it, which saves the fields through the
share service (version-checked, the request as the reason), or rejects it with a
reason; the requester may withdraw it while it is pending. The preview is computed
again when the request is decided and kept beside the first one. If the share changed
since the request was filed, approving needs the admin to confirm the share's current
version: the refusal (409) carries what changed and the new preview, so nobody
approves a request against settings they have not seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from django.db import transaction
from django.utils import timezone

from governance import roles
from governance.models import AuditEvent, ChangeRequestState, Share, ShareChangeRequest
from governance.models.change_requests import MAX_JUSTIFICATION, MAX_NOTE, REQUESTABLE_FIELDS
from governance.roles import AnyUser
from governance.selectors import scheduling
from governance.services import audit, limits, notifications
from governance.services.errors import (
    Conflict,
    Errors,
    NotFound,
    PermissionDenied,
    ValidationFailed,
)
from governance.services.kit import is_int
from governance.services.shares import share_snapshot, share_update, validate_share_fields

# Pending requests one share may have at once: enough for every lead of a team to ask,
# few enough that the review list stays readable.
MAX_PENDING_PER_SHARE = 10
# The share fields compared when telling an admin what changed since the filing.
COMPARED = (
    "limits",
    "policy",
    "borrow_limit",
    "in_share_preemption",
    "preemption_retries",
    "enabled",
    "certified_only",
    "name",
    "team",
)


def change_request_snapshot(cr: ShareChangeRequest) -> dict[str, Any]:
    """The request's API fields as JSON, for audit ``before``/``after``."""
    return audit.fields_of(
        cr,
        "id",
        "share",
        "team",
        "requester",
        "proposed",
        "base_version",
        "state",
        "decided_by",
        "decision_note",
        "applied_version",
    )


def changes_since(base: Mapping[str, Any], current: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The share fields whose value differs between ``base`` and ``current`` snapshots."""
    return [
        {"field": field, "at_filing": base.get(field), "now": current.get(field)}
        for field in COMPARED
        if base.get(field) != current.get(field)
    ]


def _links(cr: ShareChangeRequest, share: Share) -> dict[str, int | None]:
    return {"team_id": cr.team_id, "share_id": share.pk, "queue_id": share.queue_id}


def _text(value: Any, field: str, bound: int, errors: Errors, *, required: str = "") -> str:
    if not isinstance(value, str):
        errors.add(field, "Must be text.")
        return ""
    text = value.strip()
    if required and not text:
        errors.add(field, required)
    if len(text) > bound:
        errors.add(field, f"At most {bound} characters ({len(text)} given).")
    return text


def _requested_share(actor: AnyUser, share_id: Any) -> Share:
    """The share a change is requested for, when the actor leads its team."""
    found = (
        Share.objects.select_related("team", "queue").filter(pk=share_id).first()
        if limits.valid_id(share_id)
        else None
    )
    if found is None:
        raise ValidationFailed({"share": [f"No share with id {share_id}."]})
    if not roles.is_lead_of(actor, found.team_id):
        raise PermissionDenied(
            {
                "share": [
                    f"Only leads of team {found.team.name} may request changes to "
                    f"share {found.name}."
                ]
            }
        )
    return found


def change_request_file(
    *,
    actor: AnyUser,
    share: Share | int,
    changes: Mapping[str, Any],
    justification: str,
) -> ShareChangeRequest:
    """File a request to change ``share``: only a lead of the share's team.

    ``changes`` are share fields as the share service takes them, from
    ``REQUESTABLE_FIELDS`` only; they must be valid for the share and change something.
    """
    errors = Errors()
    with transaction.atomic():
        found = _requested_share(actor, share.pk if isinstance(share, Share) else share)
        text = _text(
            justification,
            "justification",
            MAX_JUSTIFICATION,
            errors,
            required="Say why the share should change: the admins decide on it.",
        )
        if not isinstance(changes, Mapping):
            raise ValidationFailed({"changes": ["Give the share fields you propose."]})
        unknown = sorted(set(changes) - set(REQUESTABLE_FIELDS))
        for field in unknown:
            errors.add(
                field[:100],
                f"Not a field a change request may propose (it may propose: "
                f"{', '.join(REQUESTABLE_FIELDS)}).",
            )
        if not changes:
            errors.add("changes", "Propose at least one field.")
        errors.raise_if_any()
        proposed = dict(changes)
        current = share_snapshot(found)
        values = validate_share_fields(found, proposed)  # field errors: 400
        if all(values.get(field) == current.get(field) for field in REQUESTABLE_FIELDS):
            raise ValidationFailed(
                {"changes": ["These are the share's current settings: nothing to request."]}
            )
        pending = ShareChangeRequest.objects.filter(
            share=found, state=ChangeRequestState.PENDING
        ).count()
        if pending >= MAX_PENDING_PER_SHARE:
            raise ValidationFailed(
                {
                    "share": [
                        f"Share {found.name} already has {pending} pending change requests; "
                        "withdraw one or wait for a decision."
                    ]
                }
            )
        cr = ShareChangeRequest.objects.create(
            share=found,
            team_id=found.team_id,
            requester=cast(Any, actor),
            proposed=proposed,
            justification=text,
            base=current,
            base_version=found.version,
            preview=scheduling.change_request_preview(found, proposed),
        )
        audit.record(
            event_type=AuditEvent.CHANGE_REQUEST_FILED,
            actor=actor,
            subject=cr,
            after=change_request_snapshot(cr),
            reason=text,
            **_links(cr, found),
        )
        notifications.change_request_filed(cr, actor)
    return cr


def _record(
    cr: ShareChangeRequest,
    share: Share,
    actor: AnyUser,
    event: AuditEvent,
    before: dict[str, Any],
    note: str,
) -> None:
    """A decision's (or withdrawal's) audit entry and notification, in its transaction."""
    audit.record(
        event_type=event,
        actor=actor,
        subject=cr,
        before=before,
        after=change_request_snapshot(cr),
        reason=note,
        **_links(cr, share),
    )
    notifications.change_request_decided(cr, actor)


def _lock(request: ShareChangeRequest | int) -> ShareChangeRequest:
    cr_id = request.pk if isinstance(request, ShareChangeRequest) else request
    found = (
        ShareChangeRequest.objects.select_for_update(of=("self",))
        .select_related("share", "share__queue", "team", "requester")
        .filter(pk=cr_id)
        .first()
        if limits.valid_id(cr_id)
        else None
    )
    if found is None:
        raise NotFound({"detail": [f"No change request with id {cr_id}."]})
    return found


def _check_decidable(actor: AnyUser, cr: ShareChangeRequest) -> None:
    if not roles.is_admin(actor):
        raise PermissionDenied({"detail": ["Only admins decide share change requests."]})
    if actor.is_authenticated and cr.requester_id == actor.pk:
        raise PermissionDenied(
            {"detail": ["You filed this change request; another admin must decide it."]}
        )
    if cr.state != ChangeRequestState.PENDING:
        raise ValidationFailed(
            {"state": [f"Only pending change requests can be decided; this one is {cr.state}."]}
        )


def change_request_approve(
    *,
    actor: AnyUser,
    request: ShareChangeRequest | int,
    note: str = "",
    confirm_version: int | None = None,
) -> ShareChangeRequest:
    """Approve a pending request (admins, never its requester): its fields are saved
    through ``share_update`` at the share's current version, the request as the reason.

    When the share changed since the filing, ``confirm_version`` must be the share's
    current version (the admin has seen what changed); otherwise Conflict carries
    ``{"share", "changed_since_filing", "preview"}``. Proposed values that no longer
    fit the share (say, a type the queue dropped) are refused naming the field.
    """
    errors = Errors()
    text = _text(note, "note", MAX_NOTE, errors)
    if confirm_version is not None and not is_int(confirm_version):
        errors.add("confirm_version", "Must be the share's version as an integer.")
    errors.raise_if_any()
    with transaction.atomic():
        cr = _lock(request)
        _check_decidable(actor, cr)
        share = Share.objects.select_related("queue", "team").get(pk=cr.share_id)
        current = share_snapshot(share)
        changed = share.version != cr.base_version
        if (changed or confirm_version is not None) and confirm_version != share.version:
            raise Conflict(
                {
                    "confirm_version": [
                        f"Share {share.name} changed since this request was filed (version "
                        f"{cr.base_version}, now {share.version}). Review what changed and "
                        f"the new preview, then approve again with confirm_version "
                        f"{share.version}."
                    ]
                },
                current={
                    "share": current,
                    "changed_since_filing": changes_since(cr.base, current),
                    "preview": scheduling.change_request_preview(share, cr.proposed),
                },
            )
        preview = scheduling.change_request_preview(share, cr.proposed)
        before = change_request_snapshot(cr)
        saved = share_update(
            actor=actor,
            share=share.pk,
            version=share.version,
            changes=cr.proposed,
            reason=f"Change request {cr.pk} of {cr.requester.get_username()}: {cr.justification}"[
                :MAX_JUSTIFICATION
            ],
        )
        cr.state = ChangeRequestState.APPROVED
        cr.decided_by_id = actor.pk
        cr.decided_at = timezone.now()
        cr.decision_note = text
        cr.decision_preview = preview
        cr.applied_version = saved.version
        cr.save()
        _record(cr, share, actor, AuditEvent.CHANGE_REQUEST_APPROVED, before, text)
    return cr


def change_request_reject(
    *, actor: AnyUser, request: ShareChangeRequest | int, note: str = ""
) -> ShareChangeRequest:
    """Reject a pending request with a reason (admins, never its requester)."""
    errors = Errors()
    text = _text(note, "note", MAX_NOTE, errors, required="Say why: the requester reads it.")
    errors.raise_if_any()
    with transaction.atomic():
        cr = _lock(request)
        _check_decidable(actor, cr)
        share = cr.share
        before = change_request_snapshot(cr)
        cr.state = ChangeRequestState.REJECTED
        cr.decided_by_id = actor.pk
        cr.decided_at = timezone.now()
        cr.decision_note = text
        if _valid(share, cr.proposed):
            cr.decision_preview = scheduling.change_request_preview(share, cr.proposed)
        cr.save()
        _record(cr, share, actor, AuditEvent.CHANGE_REQUEST_REJECTED, before, text)
    return cr


def _valid(share: Share, proposed: Mapping[str, Any]) -> bool:
    """Whether ``proposed`` still fits the share (a rejection records no preview else)."""
    try:
        validate_share_fields(share, dict(proposed))
    except ValidationFailed:
        return False
    return True


def change_request_withdraw(
    *, actor: AnyUser, request: ShareChangeRequest | int, note: str = ""
) -> ShareChangeRequest:
    """Withdraw a pending request: its requester only."""
    errors = Errors()
    text = _text(note, "note", MAX_NOTE, errors)
    errors.raise_if_any()
    with transaction.atomic():
        cr = _lock(request)
        if not (actor.is_authenticated and cr.requester_id == actor.pk):
            raise PermissionDenied(
                {"detail": ["Only the requester may withdraw a change request."]}
            )
        if cr.state != ChangeRequestState.PENDING:
            raise ValidationFailed(
                {
                    "state": [
                        f"Only pending change requests can be withdrawn; this one is {cr.state}."
                    ]
                }
            )
        before = change_request_snapshot(cr)
        cr.state = ChangeRequestState.WITHDRAWN
        cr.decision_note = text
        cr.save(update_fields=["state", "decision_note"])
        _record(cr, cr.share, actor, AuditEvent.CHANGE_REQUEST_WITHDRAWN, before, text)
    return cr
