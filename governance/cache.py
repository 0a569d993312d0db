"""A Redis cache that a Redis outage degrades to misses instead of errors.

The database is the source of truth; Redis only saves work (sessions are written through
to the database, page regions are recomputed on a miss). Django's Redis backend raises
when the server is away, which would turn every page into an error during an outage.
Here a failed call counts as a miss, and after one failure the cache is skipped for
``RETRY_AFTER_SECONDS`` so requests don't each wait for a connection timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5.0
T = TypeVar("T")


class KeptClientRedisCacheClient(RedisCacheClient):
    """Django's client makes a new ``redis.Redis`` over the same connection pool for every
    call: about 0.1 ms of CPU each, a millisecond a page reading the cache ten times. A
    ``redis.Redis`` may be shared between threads (each command takes a connection from
    the pool and gives it back), so one is kept per pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)  # type: ignore[attr-defined]
        return client


class ResilientRedisCache(RedisCache):
    _down_until = 0.0

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = KeptClientRedisCacheClient

    def _guard(self, call: Callable[[], T], fallback: T) -> T:
        if time.monotonic() < self._down_until:
            return fallback
        try:
            return call()
        except (RedisConnectionError, RedisTimeoutError, OSError):
            if not self._down_until:
                log.warning("Redis cache unreachable: serving without it for a while")
            self._down_until = time.monotonic() + RETRY_AFTER_SECONDS
            return fallback

    def _call(self, name: str, fallback: Any, *args: Any, **kwargs: Any) -> Any:
        method = getattr(super(), name)
        return self._guard(lambda: method(*args, **kwargs), fallback)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        default = args[1] if len(args) > 1 else kwargs.get("default")
        return self._call("get", default, *args, **kwargs)

    def get_many(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_many", {}, *args, **kwargs)

    def set(self, *args: Any, **kwargs: Any) -> None:
        self._call("set", None, *args, **kwargs)

    def set_many(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("set_many", [], *args, **kwargs)

    def add(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("add", False, *args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("delete", False, *args, **kwargs)

    def delete_many(self, *args: Any, **kwargs: Any) -> None:
        self._call("delete_many", None, *args, **kwargs)

    def has_key(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("has_key", False, *args, **kwargs)

    def clear(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("clear", False, *args, **kwargs)

    def touch(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("touch", False, *args, **kwargs)
