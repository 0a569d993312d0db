"""The one way to write the audit trail. Callers run inside their service's transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any, ParamSpec

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from governance.models import AuditChainHead, AuditCheckpoint, AuditEntry, AuditEvent
from governance.models.audit import audit_key_id, checkpoint_mac
from governance.services import inserts

P = ParamSpec("P")


def _written(build: Callable[P, AuditEntry]) -> Callable[P, AuditEntry]:
    """The writer of ``build``'s entries: ``record`` appends what ``entry_for`` describes."""

    def write(*args: P.args, **kwargs: P.kwargs) -> AuditEntry:
        entry = build(*args, **kwargs)
        inserts.insert(entry)
        return entry

    write.__doc__ = f"Append the entry ``{build.__name__}`` describes (and return it)."
    return write


def entry_for(
    *,
    event_type: AuditEvent,
    actor: AbstractBaseUser | AnonymousUser | None,
    subject: models.Model,
    before: Any = None,
    after: Any = None,
    reason: str = "",
    team_id: int | None = None,
    share_id: int | None = None,
    job_id: int | None = None,
    queue_id: int | None = None,
    at: Any = None,
) -> AuditEntry:
    """One audit entry, not yet written: ``record`` appends it; a service that writes many
    in one statement passes them to ``inserts.insert_many`` in its transaction.
    ``before``/``after`` are JSON-able snapshots of the change."""
    actor_id = actor.pk if actor is not None and actor.is_authenticated else None
    return AuditEntry(
        event_type=event_type,
        actor_id=actor_id,
        subject_type=subject._meta.model_name or type(subject).__name__.lower(),
        subject_id=str(subject.pk),
        subject_repr=str(subject)[:300],
        team_id=team_id,
        share_id=share_id,
        job_id=job_id,
        queue_id=queue_id,
        before=before,
        after=after,
        reason=reason,
        created_at=at or timezone.now(),
    )


def fields_of(obj: models.Model, *names: str, **computed: Any) -> dict[str, Any]:
    """An object's fields as JSON for an audit entry's ``before``/``after`` (and the API's
    409 bodies): a relation as its id under the field's name (``share``: 7), a date or
    time in ISO 8601, anything else as stored; ``computed`` adds the values a column does
    not hold as such (a price quantized, a map of limits, a user's name)."""
    snapshot: dict[str, Any] = {}
    for name in names:
        field = obj._meta.get_field(name)
        assert isinstance(field, models.Field), f"{name} is not a column"
        value = getattr(obj, field.attname)
        snapshot[name] = value.isoformat() if isinstance(value, date) else value
    snapshot.update(computed)
    return snapshot


def unchanged(before: Any, after: Any, *, ignore: tuple[str, ...] = ("version",)) -> bool:
    """Whether two snapshots say the same once ``ignore``d keys (counters such as the
    version a save bumps) are set aside: a service then writes and audits nothing."""
    if isinstance(before, dict) and isinstance(after, dict):
        return {k: v for k, v in before.items() if k not in ignore} == {
            k: v for k, v in after.items() if k not in ignore
        }
    return bool(before == after)


def record_change(
    *, before: Any, after: Any, ignore: tuple[str, ...] = ("version",), **entry: Any
) -> AuditEntry | None:
    """``record`` the change from ``before`` to ``after``; nothing for a no-op change."""
    if unchanged(before, after, ignore=ignore):
        return None
    return record(before=before, after=after, **entry)


def job_entry(
    *,
    event_type: AuditEvent,
    actor: AbstractBaseUser | AnonymousUser | None,
    job: Any,
    before: Any = None,
    after: Any = None,
    reason: str = "",
    at: Any = None,
) -> AuditEntry:
    """An entry about a job, linked to its team, share and queue for filtering, not yet
    written (``record_job`` appends it; see ``entry_for``)."""
    return entry_for(
        event_type=event_type,
        actor=actor,
        subject=job,
        before=before,
        after=after,
        reason=reason,
        team_id=job.share.team_id,
        share_id=job.share_id,
        job_id=job.pk,
        queue_id=job.queue_id,
        at=at,
    )


# Append one audit entry. ``before``/``after`` are JSON-able snapshots of the change.
record = _written(entry_for)
# Append an entry about a job, linked to its team, share and queue for filtering.
record_job = _written(job_entry)


def checkpoint(*, at: Any = None) -> list[AuditCheckpoint]:
    """Sign every chain's head that moved since its last signature with the audit key
    (``settings.AUDIT_KEY``, kept outside the database); beat does it every
    ``AUDIT_CHECKPOINT_SECONDS``. Returns the new signatures (none when no head moved).
    ``audit_verify`` then checks that each chain still leads to every head signed for it:
    entries changed and re-sealed inside the database, or removed below a signed head, do
    not."""
    key = settings.AUDIT_KEY
    signed: list[AuditCheckpoint] = []
    heads = list(AuditChainHead.objects.filter(last_seq__gt=0).order_by("chain"))
    if not heads:
        return signed
    at_heads = Q()
    for head in heads:
        at_heads |= Q(chain=head.chain, chain_seq=head.last_seq)
    done = set(AuditCheckpoint.objects.filter(at_heads).values_list("chain", "chain_seq"))
    for head in heads:
        if (head.chain, head.last_seq) in done:
            continue
        with transaction.atomic():
            made, created = AuditCheckpoint.objects.get_or_create(
                chain=head.chain,
                chain_seq=head.last_seq,
                defaults={
                    "chain_hash": head.last_hash,
                    "key_id": audit_key_id(key),
                    "mac": checkpoint_mac(key, head.last_seq, head.last_hash, head.chain),
                    "created_at": at or timezone.now(),
                },
            )
        if created:
            signed.append(made)
    return signed
