"""Idempotency keys: a retried creating request gets the first answer, not a second object.

A client that sent ``POST /api/jobs/`` and lost the connection cannot know whether the
job was created. Sent again with the same ``Idempotency-Key`` header and the same body
within :data:`KEY_TTL`, the request is answered with the status and body stored the first
time, and nothing new is created. The same key with a different body (or endpoint) is a
409: the client reused a key for another request. Keys are per user.

The guarantee comes from PostgreSQL, in the caller's transaction (``governance.api.
idempotency.idempotent`` wraps a view in one): :func:`idempotency_claim` inserts the key
before the object is created, and :func:`idempotency_record` stores the answer before the
transaction commits. A concurrent request with the same key blocks on the unique index
until the first one commits (then it reads the stored answer) or rolls back (then it goes
ahead itself), so exactly one object is created, whatever the timing. Only successful
answers are kept: a request that failed changed nothing and may simply be sent again.

These records are not audited: they describe a request, not a governance change; the
object the request created has its own audit entry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.utils import timezone

from governance.models import IdempotencyKey
from governance.roles import AnyUser
from governance.services.errors import Conflict, PermissionDenied, ValidationFailed

HEADER = "Idempotency-Key"
KEY_TTL = timedelta(hours=24)
MAX_KEY_LENGTH = 255


@dataclass(frozen=True)
class StoredAnswer:
    """The answer given to the first request with a key."""

    status: int
    body: Any


def fingerprint(*, endpoint: str, body: Any) -> str:
    """What makes two requests "the same": endpoint and body, key order ignored."""
    canonical = json.dumps(
        {"endpoint": endpoint, "body": body},
        sort_keys=True,
        separators=(",", ":"),
        cls=DjangoJSONEncoder,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _check_key(key: str) -> None:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise ValidationFailed(
            {
                HEADER: [
                    f"Give 1 to {MAX_KEY_LENGTH} printable ASCII characters, for example a "
                    "UUID, unique per request you mean to make once."
                ]
            }
        )


def _owner(actor: AnyUser) -> int:
    if actor.pk is None:
        raise PermissionDenied({HEADER: ["Sign in: idempotency keys belong to a user."]})
    return int(actor.pk)


def idempotency_claim(
    *,
    actor: AnyUser,
    key: str,
    endpoint: str,
    fingerprint: str,
    now: datetime | None = None,
) -> StoredAnswer | None:
    """Reserve ``key`` for this request, or return the answer stored for it.

    Call inside the transaction that creates the object. ``None``: this request is the
    first with the key and goes ahead (the key stays reserved until that transaction ends).
    A :class:`StoredAnswer`: an earlier request with the same key and the same body was
    answered so; give that answer again. Raises 409 (``Conflict``) when the key was used
    for a different request, 400 when the key is malformed.
    """
    _check_key(key)
    user_id = _owner(actor)
    now = now or timezone.now()
    # An expired key is forgotten, so the key can be used again.
    IdempotencyKey.objects.filter(user_id=user_id, key=key, created_at__lt=now - KEY_TTL).delete()
    try:
        with transaction.atomic():
            # Blocks while another transaction holds this (user, key): until it commits
            # (IntegrityError below: read its answer) or rolls back (the insert goes ahead).
            IdempotencyKey.objects.create(
                user_id=user_id,
                key=key,
                endpoint=endpoint,
                fingerprint=fingerprint,
                status=0,  # set by idempotency_record before the transaction commits
                body={},
                created_at=now,
            )
        return None
    except IntegrityError:
        pass
    first = IdempotencyKey.objects.get(user_id=user_id, key=key)
    if first.fingerprint != fingerprint:
        what = "another endpoint" if first.endpoint != endpoint else "a different body"
        raise Conflict(
            {
                HEADER: [
                    f"This key was already used for {what} ({first.endpoint}, "
                    f"{first.created_at:%Y-%m-%d %H:%M:%S} UTC). Send a new key for a new "
                    "request; a retry must repeat the first request exactly."
                ]
            }
        )
    return StoredAnswer(status=first.status, body=first.body)


def idempotency_record(*, actor: AnyUser, key: str, status: int, body: Any) -> None:
    """Store the answer to the request that claimed ``key``, in its transaction."""
    IdempotencyKey.objects.filter(user_id=_owner(actor), key=key).update(status=status, body=body)


def idempotency_purge(*, now: datetime | None = None) -> int:
    """Delete keys older than :data:`KEY_TTL` (beat runs it hourly); returns how many."""
    cutoff = (now or timezone.now()) - KEY_TTL
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=cutoff).delete()
    return deleted
