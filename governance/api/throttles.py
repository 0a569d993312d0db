"""DRF throttles counted in one cache for all web workers (``settings.THROTTLE_CACHE``).

DRF's own classes count in the process's default cache, so behind several gunicorn
workers each would allow the full rate. They also keep every request's time of the
last period in one cache entry, read and rewritten whole on every request (49,000 times
at the user rate of 50,000 an hour: 4.9 ms a request). These count instead, per key, the
requests of the current fixed period and of the one before, and estimate the requests
of the sliding period ending now as ``before x (share of it still inside) + current``
(a sliding-window counter): the same configured rates, at one Redis round trip (a
pipeline: INCR, EXPIRE, GET) whatever the rate. A refused request is not counted
(as DRF's), and the 429 says in ``Retry-After`` when the estimate falls back under the
rate. A Redis outage turns the shared cache into misses (``governance.cache``), which
lets requests through rather than refusing them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.http import HttpRequest, HttpResponse
from rest_framework.throttling import (
    AnonRateThrottle,
    ScopedRateThrottle,
    SimpleRateThrottle,
    UserRateThrottle,
)

from governance import guards


class SharedCacheMixin(SimpleRateThrottle):
    """A sliding-window counter in ``settings.THROTTLE_CACHE`` (see the module's
    docstring) in place of DRF's list of request times."""

    _wait: float | None = None
    num_requests: int
    duration: int

    def __init__(self) -> None:
        self.cache: Any = caches[settings.THROTTLE_CACHE]
        super().__init__()

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        now = self.timer()
        period = int(now // self.duration)
        elapsed = now - period * self.duration
        current_key, previous_key = f"{self.key}:{period}", f"{self.key}:{period - 1}"
        try:
            current, previous = self._count(current_key, previous_key)
        except Exception:  # the cache is away: let the request through
            return True
        before = previous * (1 - elapsed / self.duration)
        if before + current <= self.num_requests:
            return True
        self._uncount(current_key)
        self._wait = self._retry_after(current - 1, previous, elapsed)
        return False

    def _count(self, current_key: str, previous_key: str) -> tuple[int, int]:
        """Count this request in the current period; (current count with it, previous
        period's count)."""
        ttl = int(2 * self.duration) + 1  # the previous period is read for one more period
        if isinstance(self.cache, RedisCache):
            key = self.cache.make_and_validate_key(current_key)
            before = self.cache.make_and_validate_key(previous_key)
            client = self.cache._cache.get_client(key, write=True)
            pipe = client.pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, ttl)
            pipe.get(before)
            current, _, previous = pipe.execute()
            return int(current), int(previous or 0)
        if not self.cache.add(current_key, 1, ttl):
            self.cache.incr(current_key)
        found = self.cache.get_many([current_key, previous_key])
        return int(found.get(current_key, 1)), int(found.get(previous_key, 0))

    def _uncount(self, current_key: str) -> None:
        """Take a refused request back out of the count."""
        try:
            self.cache.decr(current_key)
        except Exception:  # expired meanwhile, or the cache is away: nothing to take back
            return

    def _retry_after(self, current: int, previous: int, elapsed: float) -> float:
        """Seconds until one more request fits: while ``previous`` slides out of the
        window in this period, or else into the next period, where ``current`` is the
        one sliding out."""
        room = self.num_requests - current - 1
        if room >= 0 and previous > 0:
            return max(0.0, self.duration * (1 - room / previous) - elapsed)
        slide = self.duration * (1 - (self.num_requests - 1) / max(current, 1))
        return self.duration - elapsed + max(0.0, slide)

    def wait(self) -> float | None:
        return self._wait


class AnonThrottle(SharedCacheMixin, AnonRateThrottle):
    """Anonymous requests per address (sign-in, token, password reset pages)."""


class UserThrottle(SharedCacheMixin, UserRateThrottle):
    """Requests per signed-in user: a runaway script cannot starve the others."""


class SignInThrottle(SharedCacheMixin, ScopedRateThrottle):
    """Sign-in attempts per address at the token endpoint, on top of django-axes's
    per-username lockout."""

    scope_attr = "throttle_scope"

    def allow_request(self, request: Any, view: Any) -> bool:
        # ScopedRateThrottle's: the rate is the view's scope's, known only now.
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        num_requests, duration = self.parse_rate(self.rate)
        if num_requests is None or duration is None:
            return True
        self.num_requests, self.duration = num_requests, duration
        return SharedCacheMixin.allow_request(self, request, view)

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
