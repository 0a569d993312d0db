"""API tokens (django-rest-knox): created and revoked by their owner, audited.

A token is shown once, when it is made; the database keeps only its hash and the first
characters (``token_key``) to tell tokens apart. Every token expires: after
``API_TOKEN_TTL_HOURS`` (settings) unless the owner asks for less.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from knox.models import AuthToken

from governance import roles
from governance.models import AuditEvent
from governance.roles import AnyUser
from governance.services import audit
from governance.services.errors import Errors, NotFound, PermissionDenied
from governance.services.limits import check_int


def max_token_hours() -> int:
    return int(settings.API_TOKEN_TTL_HOURS)


def token_create(*, actor: AnyUser, hours: int | None = None, via: str = "page") -> tuple[Any, str]:
    """A new token for ``actor`` itself; returns the row and the token text (shown once).

    ``hours`` (1 to ``API_TOKEN_TTL_HOURS``) shortens its life. Audited as TOKEN_CREATED
    (``via``: the page or the sign-in endpoint).
    """
    if not actor.is_authenticated:
        raise PermissionDenied({"detail": ["Sign in to create a token."]})
    errors = Errors()
    if hours is not None:
        check_int(
            errors,
            "hours",
            hours,
            minimum=1,
            maximum=max_token_hours(),
            label="the token's lifetime in hours",
        )
    errors.raise_if_any()
    ttl = timedelta(hours=hours if hours is not None else max_token_hours())
    with transaction.atomic():
        # The user's expired tokens go now: requests no longer look for them
        # (governance/api/token_auth.py), and each refuses an expired token anyway.
        AuthToken.objects.filter(user_id=actor.pk, expiry__lt=timezone.now()).delete()
        instance, token = AuthToken.objects.create(user=actor, expiry=ttl)
        audit.record(
            event_type=AuditEvent.TOKEN_CREATED,
            actor=actor,
            subject=actor,
            after={
                "token": instance.token_key,
                "expires": instance.expiry.isoformat() if instance.expiry else None,
                "via": via,
            },
        )
    return instance, token


def token_revoke(*, actor: AnyUser, token_key: str) -> None:
    """Revoke one of ``actor``'s tokens (an admin may revoke anyone's). TOKEN_REVOKED."""
    if not actor.is_authenticated:
        raise PermissionDenied({"detail": ["Sign in to revoke a token."]})
    with transaction.atomic():
        tokens = AuthToken.objects.select_for_update().filter(token_key=str(token_key)[:25])
        if not roles.is_admin(actor):
            tokens = tokens.filter(user_id=actor.pk)
        found = tokens.select_related("user").first()
        if found is None:
            raise NotFound({"detail": ["No such token of yours."]})
        owner = found.user
        found.delete()
        audit.record(
            event_type=AuditEvent.TOKEN_REVOKED,
            actor=actor,
            subject=owner,
            before={"token": found.token_key},
            after=None,
        )


def tokens_of(user: AnyUser) -> list[Any]:
    """The user's tokens that have not expired, newest first."""
    return list(
        AuthToken.objects.filter(user_id=user.pk, expiry__gt=timezone.now()).order_by("-created")
    )
