"""``Authorization: Token <token>``: django-rest-knox's check, in one query.

The check is knox's, step for step (the token's key finds the candidate rows, the digest
of the whole token is compared in constant time, an expired token is refused and
deleted); the rows are read by a statement built once (``selectors.tokens``) rather than
compiled by the ORM on every request.

Knox's ``TokenAuthentication`` reads every other token of the user on each request, to
delete the expired ones: a second query on every API call, growing with the user's
tokens (an agent or a script that signs in often has many). Here a request checks only
its own token (an expired one is still refused and deleted, as knox does); the user's
other expired tokens are deleted when they make a new one (``services.tokens``), so they
still do not pile up. Revocation is unchanged: a revoked token's row is gone, and the
next request with it finds nothing.
"""

from __future__ import annotations

import binascii
from hmac import compare_digest
from typing import Any

from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.crypto import hash_token
from knox.settings import CONSTANTS, knox_settings
from knox.signals import token_expired
from rest_framework.exceptions import AuthenticationFailed

from governance.selectors import tokens as token_selectors


class TokenAuthentication(KnoxTokenAuthentication):
    def authenticate_credentials(self, token: bytes) -> tuple[Any, Any]:
        """Knox's ``authenticate_credentials`` with the rows read by ``selectors.tokens``;
        a token that is not UTF-8 is an invalid token (401), not an error."""
        refused = AuthenticationFailed("Invalid token.")
        text = token.decode("utf-8", errors="replace")
        for auth_token in token_selectors.with_key(text[: CONSTANTS.TOKEN_KEY_LENGTH]):
            if self._cleanup_token(auth_token):
                continue
            try:
                digest = hash_token(text)
            except (TypeError, binascii.Error):
                raise refused from None
            if compare_digest(digest, auth_token.digest):
                if knox_settings.AUTO_REFRESH and auth_token.expiry:
                    self.renew_token(auth_token)
                return self.validate_user(auth_token)
        raise refused

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
