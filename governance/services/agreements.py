"""Allocation agreements: the written, versioned record behind shares (docs/data-model.md).

Versioning: every version of an agreement is kept as an ``AgreementVersion`` snapshot.
Creating writes version 1's snapshot; each edit bumps ``version`` and writes the new
version's snapshot, so the row of version ``n`` is the agreement as it was before the
edit that made ``n + 1``. ``edited_by``/``edited_at``/``reason`` on a snapshot describe
the write that produced that version. Edits name the version they read (optimistic
locking): a stale one is refused with 409.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.postgres.search import SearchVector
from django.db import transaction
from django.utils import timezone

from governance import roles
from governance.models import Agreement, AgreementVersion, AuditEvent, Share
from governance.roles import AnyUser
from governance.services import audit
from governance.services import promises as promise_services
from governance.services.errors import (
    Conflict,
    Errors,
    NotFound,
    PermissionDenied,
)

TITLE_MAX_LENGTH = 200
SEARCH_CONFIG = "english"

# Fields a PATCH may change; ``version`` and ``reason`` ride along.
EDITABLE_FIELDS = (
    "title",
    "body",
    "shares",
    "reclaim_assumptions",
    "recovery_assumptions",
    "owner",
    "editors",
    "review_by",
    "promises",
)


def search_vector_expression() -> Any:
    """Title weighs most (A), then the body (B), then the assumptions (C)."""
    return (
        SearchVector("title", weight="A", config=SEARCH_CONFIG)
        + SearchVector("body", weight="B", config=SEARCH_CONFIG)
        + SearchVector("reclaim_assumptions", weight="C", config=SEARCH_CONFIG)
        + SearchVector("recovery_assumptions", weight="C", config=SEARCH_CONFIG)
    )


def agreement_snapshot(
    agreement: Agreement, *, promises: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The agreement's fields as JSON, for audit ``before``/``after`` (``promises``: the
    ones about to be set instead of those in force)."""
    return audit.fields_of(
        agreement,
        "id",
        "title",
        "body",
        "reclaim_assumptions",
        "recovery_assumptions",
        "review_by",
        "version",
        shares=sorted(agreement.shares.values_list("id", flat=True)),
        owner=agreement.owner.get_username(),
        editors=sorted(agreement.editors.values_list("username", flat=True)),
        promises=promises if promises is not None else promise_services.active_promises(agreement),
    )


def _resolve_users(errors: Errors, field: str, names: Iterable[Any]) -> list[Any]:
    user_model = get_user_model()
    names = list(names)
    if not all(isinstance(n, str) for n in names):
        errors.add(field, "Give usernames.")
        return []
    users = {u.get_username(): u for u in user_model.objects.filter(username__in=names)}
    missing = [n for n in names if n not in users]
    if missing:
        errors.add(field, f"Unknown user(s): {', '.join(missing)}.")
    return [users[n] for n in dict.fromkeys(names) if n in users]


def _resolve_shares(
    errors: Errors, actor: AnyUser, ids: Iterable[Any], keep: set[int]
) -> tuple[list[Share], list[str]]:
    """Shares by id; non-admins may only add shares of teams they lead (``keep`` are
    already linked and may stay). Returns the shares and any permission problems."""
    ids = list(ids)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        errors.add("shares", "Give share ids.")
        return [], []
    found = {s.pk: s for s in Share.objects.select_related("team").filter(pk__in=ids)}
    missing = [str(i) for i in ids if i not in found]
    if missing:
        errors.add("shares", f"No share with id {', '.join(missing)}.")
    forbidden: list[str] = []
    if not roles.is_admin(actor):
        led = roles.lead_team_ids(actor)
        forbidden = [
            f"{s} (team {s.team.name})"
            for s in found.values()
            if s.pk not in keep and s.team_id not in led
        ]
    return [found[i] for i in dict.fromkeys(ids) if i in found], forbidden


def _validate_text(errors: Errors, values: dict[str, Any]) -> None:
    if "title" in values:
        title = values["title"]
        if not isinstance(title, str) or not title.strip():
            errors.add("title", "A title is required.")
        elif len(title) > TITLE_MAX_LENGTH:
            errors.add("title", f"At most {TITLE_MAX_LENGTH} characters.")
    for field in ("body", "reclaim_assumptions", "recovery_assumptions"):
        if field in values and not isinstance(values[field], str):
            errors.add(field, "Give text.")
    if (
        "review_by" in values
        and values["review_by"] is not None
        and not isinstance(values["review_by"], date)
    ):
        errors.add("review_by", "Give a date (YYYY-MM-DD) or null.")


def _write_version(
    agreement: Agreement, *, edited_by: AnyUser, reason: str, at: Any, review: bool = False
) -> None:
    AgreementVersion.objects.create(
        review=review,
        agreement=agreement,
        version=agreement.version,
        title=agreement.title,
        body=agreement.body,
        reclaim_assumptions=agreement.reclaim_assumptions,
        recovery_assumptions=agreement.recovery_assumptions,
        review_by=agreement.review_by,
        share_ids=sorted(agreement.shares.values_list("id", flat=True)),
        promises=promise_services.active_promises(agreement),
        owner=agreement.owner,
        edited_by_id=edited_by.pk if edited_by.is_authenticated else None,
        edited_at=at,
        reason=reason,
    )


def _refresh_search(agreement: Agreement) -> None:
    Agreement.objects.filter(pk=agreement.pk).update(search_vector=search_vector_expression())


def _audit_links(agreement: Agreement) -> dict[str, int | None]:
    """Link the audit entry to the share (and team) when exactly one share is linked."""
    shares = list(agreement.shares.all()[:2])
    if len(shares) == 1:
        return {
            "share_id": shares[0].pk,
            "team_id": shares[0].team_id,
            "queue_id": shares[0].queue_id,
        }
    return {}


def agreement_create(
    *,
    actor: AnyUser,
    title: str,
    body: str = "",
    shares: Iterable[int] = (),
    reclaim_assumptions: str = "",
    recovery_assumptions: str = "",
    owner: str | None = None,
    editors: Iterable[str] = (),
    review_by: date | None = None,
    promises: list[dict[str, Any]] | None = None,
    reason: str = "",
) -> Agreement:
    """Create an agreement: admins and team leads (a lead links only their teams' shares).

    The owner defaults to the creator. Version 1's snapshot is written at once, with the
    ``promises`` (``services.promises.clean_promises`` says what one holds).
    """
    if not (roles.is_admin(actor) or roles.lead_team_ids(actor)):
        raise PermissionDenied({"detail": ["Only admins and team leads may create agreements."]})
    with transaction.atomic():
        errors = Errors()
        values = {
            "title": title,
            "body": body,
            "reclaim_assumptions": reclaim_assumptions,
            "recovery_assumptions": recovery_assumptions,
            "review_by": review_by,
        }
        _validate_text(errors, values)
        share_objs, forbidden = _resolve_shares(errors, actor, shares, keep=set())
        if forbidden:
            raise PermissionDenied(
                {"shares": [f"You may only link shares of teams you lead: {', '.join(forbidden)}."]}
            )
        owner_user: Any = actor
        if owner is not None:
            resolved = _resolve_users(errors, "owner", [owner])
            owner_user = resolved[0] if resolved else None
        editor_users = _resolve_users(errors, "editors", editors)
        cleaned = promise_services.clean_promises(errors, promises or [], share_objs)
        errors.raise_if_any()

        now = timezone.now()
        agreement = Agreement.objects.create(
            title=title.strip(),
            body=body,
            reclaim_assumptions=reclaim_assumptions,
            recovery_assumptions=recovery_assumptions,
            owner=owner_user,
            review_by=review_by,
            version=1,
        )
        agreement.shares.set(share_objs)
        agreement.editors.set(editor_users)
        promise_services.apply_promises(agreement, cleaned, agreement.version)
        _refresh_search(agreement)
        _write_version(agreement, edited_by=actor, reason=reason or "created", at=now)
        audit.record(
            event_type=AuditEvent.AGREEMENT_CREATED,
            actor=actor,
            subject=agreement,
            before=None,
            after=agreement_snapshot(agreement),
            reason=reason,
            at=now,
            **_audit_links(agreement),
        )
    return agreement


def may_change(actor: AnyUser, agreement: Agreement) -> bool:
    """The owner, the editors and admins may change an agreement."""
    if roles.is_admin(actor):
        return True
    if not actor.is_authenticated:
        return False
    if agreement.owner_id == actor.pk:
        return True
    # Through ``all()``, so a caller that prefetched the editors pays no query.
    return any(editor.pk == actor.pk for editor in agreement.editors.all())


def _sorted(items: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Promises in a stable order, so one list in another order is no change."""
    if items is None:
        return None
    return sorted(items, key=lambda p: sorted((k, str(v)) for k, v in p.items()))


def _locked(agreement_id: int) -> Agreement:
    """The agreement, locked for the rest of the transaction (404 when absent)."""
    locked = (
        Agreement.objects.select_for_update(of=("self",))
        .select_related("owner")
        .filter(pk=agreement_id)
        .first()
    )
    if locked is None:
        raise NotFound({"detail": [f"No agreement with id {agreement_id}."]})
    return locked


def _check_version(locked: Agreement, version: int | None) -> None:
    """409 unless ``version`` is the one stored (optimistic locking)."""
    if version != locked.version:
        raise Conflict(
            {
                "version": [
                    f"The agreement changed since you read it (you sent version {version}, "
                    f"it is now {locked.version}); reload and try again."
                ]
            }
        )


def _linked_shares(
    errors: Errors, actor: AnyUser, locked: Agreement, changes: Mapping[str, Any]
) -> list[Share] | None:
    """The shares to link, when the edit names them (None: unchanged); a non-admin may add
    only shares of teams they lead."""
    share_objs: list[Share] | None = None
    if "shares" in changes:
        current = set(locked.shares.values_list("id", flat=True))
        share_objs, forbidden = _resolve_shares(
            errors, actor, changes["shares"] or [], keep=current
        )
        if forbidden:
            raise PermissionDenied(
                {"shares": [f"You may only link shares of teams you lead: {', '.join(forbidden)}."]}
            )
    return share_objs


def _new_owner(errors: Errors, changes: Mapping[str, Any]) -> Any:
    """The new owner, when the edit names one (None: unchanged)."""
    owner_user: Any = None
    if "owner" in changes:
        if changes["owner"] is None:
            errors.add("owner", "An agreement needs an owner.")
        else:
            resolved = _resolve_users(errors, "owner", [changes["owner"]])
            owner_user = resolved[0] if resolved else None
    return owner_user


def _check_unlinked_promises(errors: Errors, locked: Agreement, share_objs: list[Share]) -> None:
    """Promises about a share or team no longer linked must go with it."""
    kept_ids = {s.pk for s in share_objs}
    kept_teams = {s.team_id for s in share_objs}
    for item in promise_services.active_promises(locked):
        if (item["share"] is not None and item["share"] not in kept_ids) or (
            item["team"] is not None and item["team"] not in kept_teams
        ):
            errors.add(
                "shares",
                "A promise is about a share or team being unlinked: withdraw the promise first.",
            )
            break


def _set_fields(locked: Agreement, changes: Mapping[str, Any], owner_user: Any) -> None:
    """Set the edited text fields (the title trimmed) and the new owner, if any."""
    for field in ("title", "body", "reclaim_assumptions", "recovery_assumptions", "review_by"):
        if field in changes:
            value = changes[field]
            setattr(locked, field, value.strip() if field == "title" else value)
    if owner_user is not None:
        locked.owner = owner_user


def agreement_update(
    *,
    actor: AnyUser,
    agreement: Agreement | int,
    version: int | None,
    reason: str = "",
    **changes: Any,
) -> Agreement:
    """Edit an agreement (owner, editors, admins), naming the version read.

    Only the owner and admins may change ``owner`` and ``editors``. A non-admin may add
    only shares of teams they lead (already linked shares may stay). An edit that changes
    nothing writes nothing.
    """
    unknown = sorted(set(changes) - set(EDITABLE_FIELDS))
    if unknown:
        raise TypeError(f"agreement_update() got unexpected field(s): {', '.join(unknown)}")
    agreement_id = agreement.pk if isinstance(agreement, Agreement) else agreement
    with transaction.atomic():
        locked = _locked(agreement_id)
        if not may_change(actor, locked):
            raise PermissionDenied(
                {"detail": ["Only the owner, the editors and admins may change this agreement."]}
            )
        errors = Errors()
        if version is None:
            errors.add("version", "Send the version you read.")
            errors.raise_if_any()
        _check_version(locked, version)
        owner_or_admin = roles.is_admin(actor) or locked.owner_id == actor.pk
        for field in ("owner", "editors"):
            if field in changes and not owner_or_admin:
                raise PermissionDenied({field: [f"Only the owner and admins may change {field}."]})
        _validate_text(errors, changes)
        before = agreement_snapshot(locked)
        share_objs = _linked_shares(errors, actor, locked, changes)
        owner_user = _new_owner(errors, changes)
        editor_users: list[Any] | None = None
        if "editors" in changes:
            editor_users = _resolve_users(errors, "editors", changes["editors"] or [])
        cleaned: list[dict[str, Any]] | None = None
        if "promises" in changes:
            linked = share_objs if share_objs is not None else list(locked.shares.all())
            cleaned = promise_services.clean_promises(errors, changes["promises"], linked)
        elif share_objs is not None:
            _check_unlinked_promises(errors, locked, share_objs)
        errors.raise_if_any()

        _set_fields(locked, changes, owner_user)
        if share_objs is not None:
            locked.shares.set(share_objs)
        if editor_users is not None:
            locked.editors.set(editor_users)
        after = agreement_snapshot(
            locked, promises=_sorted(cleaned if cleaned is not None else before["promises"])
        )
        if audit.unchanged({**before, "promises": _sorted(before["promises"])}, after):
            return locked
        now = timezone.now()
        locked.version += 1
        locked.save()
        if cleaned is not None:
            promise_services.apply_promises(locked, cleaned, locked.version)
        _refresh_search(locked)
        _write_version(locked, edited_by=actor, reason=reason, at=now)
        after = agreement_snapshot(locked)
        audit.record(
            event_type=AuditEvent.AGREEMENT_UPDATED,
            actor=actor,
            subject=locked,
            before=before,
            after=after,
            reason=reason,
            at=now,
            **_audit_links(locked),
        )
    return locked


MAX_NOTE = 5000


def may_review(actor: AnyUser, agreement: Agreement) -> bool:
    """Reviewers, admins and who may change the agreement record a review."""
    return roles.can_decide_exceptions(actor) or may_change(actor, agreement)


def agreement_review(
    *,
    actor: AnyUser,
    agreement: Agreement | int,
    version: int | None,
    note: str,
    review_by: date | None = None,
) -> Agreement:
    """Record a review: a new version even when nothing else changes, with its ``note``
    (required) and the next ``review_by`` (null: no date)."""
    agreement_id = agreement.pk if isinstance(agreement, Agreement) else agreement
    with transaction.atomic():
        locked = _locked(agreement_id)
        if not may_review(actor, locked):
            raise PermissionDenied(
                {"detail": ["Reviewers, admins, the owner and the editors record reviews."]}
            )
        errors = Errors()
        if version is None:
            errors.add("version", "Send the version you read.")
        if not isinstance(note, str) or not note.strip():
            errors.add("note", "Say what the review found.")
        elif len(note) > MAX_NOTE:
            errors.add("note", f"At most {MAX_NOTE} characters.")
        _validate_text(errors, {"review_by": review_by})
        if isinstance(review_by, date) and review_by <= timezone.localdate():
            errors.add("review_by", "The next review date must lie in the future.")
        errors.raise_if_any()
        _check_version(locked, version)
        before = agreement_snapshot(locked)
        now = timezone.now()
        locked.review_by = review_by
        locked.version += 1
        locked.save()
        _write_version(locked, edited_by=actor, reason=note.strip(), at=now, review=True)
        audit.record(
            event_type=AuditEvent.AGREEMENT_UPDATED,
            actor=actor,
            subject=locked,
            before=before,
            after={**agreement_snapshot(locked), "reviewed": True},
            reason=note.strip(),
            at=now,
            **_audit_links(locked),
        )
    return locked


def agreement_evaluate(*, actor: AnyUser, agreement: Agreement | int) -> Agreement:
    """Evaluate the agreement's promises now, on request of someone who may review it."""
    agreement_id = agreement.pk if isinstance(agreement, Agreement) else agreement
    found = Agreement.objects.filter(pk=agreement_id).prefetch_related("editors").first()
    if found is None:
        raise NotFound({"detail": [f"No agreement with id {agreement_id}."]})
    if not may_review(actor, found):
        raise PermissionDenied(
            {"detail": ["The owner, the editors, reviewers and admins ask for an evaluation."]}
        )
    promise_services.promises_evaluate(agreements=[found.pk])
    return found
