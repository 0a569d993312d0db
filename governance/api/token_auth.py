"""``Authorization: Token <token>``: django-rest-knox's check, in one query.

Knox's ``TokenAuthentication`` reads every other token of the user on each request, to
delete the expired ones: a second query on every API call, growing with the user's
tokens (an agent or a script that signs in often has many). Here a request checks only
its own token (an expired one is still refused and deleted, as knox does); the user's
other expired tokens are deleted when they make a new one (``services.tokens``), so they
still do not pile up. Revocation is unchanged: a revoked token's row is gone, and the
next request with it finds nothing.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.signals import token_expired


class TokenAuthentication(KnoxTokenAuthentication):
    def _cleanup_token(self, auth_token: Any) -> bool:
        """True (and the row deleted) when this request's token has expired."""
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            username = auth_token.user.get_username()
            auth_token.delete()
            token_expired.send(sender=self.__class__, username=username, source="auth_token")
            return True
        return False


class TokenScheme(KnoxTokenScheme):
    """The OpenAPI security scheme of this class: knox's own (``knoxApiToken``), so the
    schema says what it said before."""

    target_class = "governance.api.token_auth.TokenAuthentication"
