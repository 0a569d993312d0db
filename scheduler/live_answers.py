"""Answers of windows that have not ended, computed outside the request and served "as of"
their time (docs/signals.md#windows-that-end-now, docs/ledger.md#on-the-page).

A window that ends now (the Signals page's "last day", a share's lending ledger, this
month's chargeback) reads the queue's recording up to now: seconds of work on a busy
queue, and a different answer every moment, so the store of closed windows
(``signal_store``) cannot keep it. The pages therefore show the answer computed at some
moment ``as_of`` (a rolling window ``[as_of - span, as_of)``, or a fixed one recorded up to
``as_of``) and say so, and the answer is kept in the shared cache (Redis) per kind and
parameters (queue or share, window, grouping):

- computed from another version of the queue's record than the one stored now
  (``version``: the caller's, ``state_cache.queue_record_version``: the newest job event
  and audit entry; a job submitted, started, reclaimed or ended since, a policy
  changed): the request that takes the key's lock computes it afresh, the others serve
  what is kept meanwhile, so whoever just changed something sees it (a heartbeat, which
  records nothing the window counts, does not; an event that commits after one with a
  higher id was already read leaves the version as it was, and shows once the answer
  is no longer fresh, below);
- younger than ``FRESH_FOR``: served as it is;
- older, up to ``SERVE_STALE_FOR``: served as it is, and one recompute is queued (the
  Celery task ``scheduler.tasks.refresh_live_answer``), whoever takes the key's lock
  (``cache.add``, expiring after ``LOCK_SECONDS``) first: one recompute per key at a time,
  however many clients read it;
- missing, or older than that (no worker answering): the request that takes the lock
  computes it and stores it; the others serve what is there, or say it is being computed
  (``Live.answer`` None: the page shows "computing…" and polls).

What each kind computes is registered by the module that owns it (``register``:
``governance.selectors.scheduling``), so the task computes exactly what the page would.
The cache going away (Redis down) turns every read into a computation in the request, as
before this module, never into an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.cache import caches
from django.utils import timezone

log = logging.getLogger(__name__)

CACHE_ALIAS = "shared"
FRESH_FOR = timedelta(seconds=60)
SERVE_STALE_FOR = timedelta(minutes=15)
LOCK_SECONDS = 300
KEEP_SECONDS = 6 * 3600  # a key nobody reads for this long is computed again when read
REFRESH_TASK = "scheduler.tasks.refresh_live_answer"
"""The recompute task, by name: the tasks module imports this one."""

Compute = Callable[[dict[str, Any], datetime], dict[str, Any] | None]
_KINDS: dict[str, Compute] = {}


@dataclass(frozen=True)
class Live:
    """What a page shows of a window that ends now: the answer computed at ``as_of``
    (None, with ``computing`` True, while its first computation runs elsewhere)."""

    answer: dict[str, Any] | None
    as_of: datetime | None
    computing: bool = False


def register(kind: str, compute: Compute) -> None:
    """``compute(params, now)``: the answer of ``kind`` for ``params`` as of ``now`` (None
    when what the parameters name no longer exists: nothing is stored)."""
    _KINDS[kind] = compute


def key(kind: str, params: dict[str, Any]) -> str:
    """The cache key of ``kind`` for ``params`` (in this database: tests and benches that
    share a Redis never read each other's answers)."""
    text = json.dumps(params, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return f"live:{settings.DATABASES['default']['NAME']}:{kind}:{digest}"


def _cache() -> Any:
    return caches[CACHE_ALIAS]


def _read(cache_key: str) -> tuple[dict[str, Any], datetime, str] | None:
    """(answer, as of, version) kept under ``cache_key``."""
    try:
        entry = _cache().get(cache_key)
    except Exception:  # an optimisation only: without the cache, compute
        return None
    if not isinstance(entry, dict) or "as_of" not in entry:
        return None
    return entry["answer"], datetime.fromisoformat(entry["as_of"]), entry.get("version", "")


def _lock(cache_key: str) -> str | None:
    """A token when this caller now holds the key's recompute lock; None when another does.
    A cache that cannot be reached counts as held by nobody: the caller computes."""
    token = uuid.uuid4().hex
    try:
        if _cache().add(f"{cache_key}:lock", token, LOCK_SECONDS):
            return token
        held = _cache().get(f"{cache_key}:lock")
    except Exception:
        return token
    return None if held is not None else token


def _unlock(cache_key: str, token: str) -> None:
    try:
        if _cache().get(f"{cache_key}:lock") == token:
            _cache().delete(f"{cache_key}:lock")
    except Exception:
        log.warning("could not release the lock of %s; it expires by itself", cache_key)


def _compute_and_store(kind: str, params: dict[str, Any], cache_key: str, version: str) -> Live:
    now = timezone.now()
    answer = _KINDS[kind](params, now)
    if answer is not None:
        try:
            _cache().set(
                cache_key,
                {"as_of": now.isoformat(), "answer": answer, "version": version},
                timeout=KEEP_SECONDS,
            )
        except Exception:
            log.warning("could not keep the %s answer; it is computed again next time", kind)
    return Live(answer, now)


def serve(kind: str, params: dict[str, Any], version: str = "") -> Live:
    """The answer of ``kind`` for ``params`` as the module's docstring describes: from the
    cache when there is one of this ``version`` of the queue's record young enough, else
    computed here by one caller at a time."""
    cache_key = key(kind, params)
    found = _read(cache_key)
    now = timezone.now()
    if found is not None and found[2] != version:
        token = _lock(cache_key)
        if token is None:
            return Live(found[0], found[1])
        return _computed_under(kind, params, cache_key, token, version)
    if found is not None and now - found[1] < FRESH_FOR:
        return Live(found[0], found[1])
    if found is not None and now - found[1] < SERVE_STALE_FOR:
        token = _lock(cache_key)
        if token is not None and not _queue_refresh(kind, params, token, version):
            return _computed_under(kind, params, cache_key, token, version)
        return Live(found[0], found[1])
    token = _lock(cache_key)
    if token is None:
        return Live(found[0], found[1]) if found is not None else Live(None, None, computing=True)
    return _computed_under(kind, params, cache_key, token, version)


def _computed_under(
    kind: str, params: dict[str, Any], cache_key: str, token: str, version: str
) -> Live:
    try:
        return _compute_and_store(kind, params, cache_key, version)
    finally:
        _unlock(cache_key, token)


def _queue_refresh(kind: str, params: dict[str, Any], token: str, version: str) -> bool:
    """Queue the recompute (the lock's token and the state's version travel with it);
    False when the broker cannot be reached (the caller then computes)."""
    try:
        current_app.signature(REFRESH_TASK, args=(kind, params, token, version)).apply_async(
            retry=False, expires=LOCK_SECONDS
        )
    except Exception:
        log.warning("could not queue the recompute of a %s answer; computing it now", kind)
        return False
    return True


def refresh(kind: str, params: dict[str, Any], token: str | None = None, version: str = "") -> Live:
    """The task's work: compute and store the answer, then release the lock it was queued
    under (``token``). Safe to run any number of times."""
    if kind not in _KINDS:
        raise KeyError(f"no live answer of kind {kind!r} is registered")
    cache_key = key(kind, params)
    started = time.perf_counter()
    try:
        return _compute_and_store(kind, params, cache_key, version)
    finally:
        if token is not None:
            _unlock(cache_key, token)
        log.info("%s answer recomputed in %.2f s", kind, time.perf_counter() - started)


def forget(kind: str, params: dict[str, Any]) -> None:
    """Drop the kept answer (the next read computes it)."""
    try:
        _cache().delete(key(kind, params))
    except Exception:
        log.warning("could not forget a %s answer", kind)
