"""DRF throttles counted in one cache for all web workers (``settings.THROTTLE_CACHE``).

DRF's own classes count in the process's default cache, so behind several gunicorn
workers each would allow the full rate. A Redis outage turns the shared cache into
misses (``governance.cache``), which lets requests through rather than refusing them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import caches
from rest_framework.throttling import AnonRateThrottle, ScopedRateThrottle, UserRateThrottle


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
