"""DRF throttles counted in one cache for all web workers (``settings.THROTTLE_CACHE``).

DRF's own classes count in the process's default cache, so behind several gunicorn
workers each would allow the full rate. A Redis outage turns the shared cache into
misses (``governance.cache``), which lets requests through rather than refusing them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse
from rest_framework.throttling import AnonRateThrottle, ScopedRateThrottle, UserRateThrottle

from governance import guards


class SharedCacheMixin:
    def __init__(self) -> None:
        self.cache: Any = caches[settings.THROTTLE_CACHE]
        super().__init__()


class AnonThrottle(SharedCacheMixin, AnonRateThrottle):
    """Anonymous requests per address (sign-in, token, password reset pages)."""


class UserThrottle(SharedCacheMixin, UserRateThrottle):
    """Requests per signed-in user: a runaway script cannot starve the others."""


class SignInThrottle(SharedCacheMixin, ScopedRateThrottle):
    """Sign-in attempts per address at the token endpoint, on top of django-axes's
    per-username lockout."""

    scope_attr = "throttle_scope"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        # Per address whether or not the request carries credentials.
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class _Scope:
    """What ``ScopedRateThrottle`` reads of a view: its scope."""

    def __init__(self, scope: str) -> None:
        self.throttle_scope = scope


def posts_per_address(scope: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """For the web's own forms (sign-in, password reset): their POSTs per address are
    counted by ``SignInThrottle`` at the rate of ``scope`` (the web sign-in shares the
    token endpoint's ``sign_in`` count); over it, a 429 page saying when to try again."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method == "POST":
                throttle = SignInThrottle()
                if not throttle.allow_request(cast(Any, request), cast(Any, _Scope(scope))):
                    wait = math.ceil(throttle.wait() or 1)
                    response = guards.error_response(
                        request,
                        429,
                        {
                            "detail": [
                                f"Too many attempts from your address: try again in {wait} seconds."
                            ]
                        },
                    )
                    response["Retry-After"] = str(wait)
                    return response
            return view(request, *args, **kwargs)

        return limited

    return decorate
