"""Cached page regions: HTML rendered once per stored state, served with fresh times.

The live regions and the job tables of the pages are pure functions of stored rows, so
each is cached under a key that names the state it shows (``selectors.state_cache``:
a fingerprint of the rows, or ids that never change). Only relative times ("3 minutes
ago") move with the clock: a region is rendered with ``when_slots`` in its context, so
``{% when %}`` leaves a slot per time (``templatetags.web_time``), and every serving
writes the words current then. One helper, so no view carries its own cache plumbing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from governance.selectors import state_cache
from governance.templatetags import web_time

K = TypeVar("K")
Rendered = tuple[str, list[web_time.Slot]]


def render_with_slots(
    template_name: str, context: Mapping[str, Any], request: HttpRequest | None = None
) -> Rendered:
    """The template's HTML with a slot per ``{% when %}``, and the slots' times."""
    times: list[web_time.Slot] = []
    html = render_to_string(template_name, {**context, "when_slots": times}, request=request)
    return html, times


# Set while a page fragment is rendered for the cache (web/fragments.py): a region
# written into it keeps its times as slots, which each serving of the fragment fills.
_deferring: contextvars.ContextVar[bool] = contextvars.ContextVar("deferring", default=False)


@contextlib.contextmanager
def deferred_times() -> Iterator[None]:
    """Within: ``fill`` leaves each time as a slot naming it (``web_time.inline_slots``)."""
    token = _deferring.set(True)
    try:
        yield
    finally:
        _deferring.reset(token)


def fill(rendered: Rendered) -> SafeString:
    """Rendered HTML with each slot's time written as of now (within
    ``deferred_times``: as slots naming their time, written when served)."""
    if _deferring.get():
        return mark_safe(web_time.inline_slots(*rendered))
    return web_time.fill_slots(*rendered)


def lookup(key: str) -> SafeString | None:
    """The region cached under ``key``, times filled; None on a miss."""
    found = state_cache.cache_get_many([key]).get(key)
    return fill(found) if found is not None else None


def store(key: str, rendered: Rendered, timeout: float = 60.0) -> None:
    state_cache.cache_set_many({key: rendered}, timeout)


def region(key: str, render: Callable[[], Rendered], timeout: float = 60.0) -> SafeString:
    """The region cached under ``key`` (rendered by ``render`` on a miss), times filled."""
    found = state_cache.cache_get_many([key]).get(key)
    if found is None:
        found = render()
        store(key, found, timeout)
    return fill(found)


def template_region(
    key: str,
    template_name: str,
    context: Callable[[], Mapping[str, Any]],
    timeout: float = 60.0,
) -> SafeString:
    """``region`` of one template (partial) rendered from ``context()`` on a miss."""
    return region(key, lambda: render_with_slots(template_name, context()), timeout)


def regions(
    keys: Mapping[str, K], render: Callable[[K], Rendered], timeout: float = 60.0
) -> dict[str, SafeString]:
    """Many regions in one cache read and at most one write: key -> filled HTML."""
    found = state_cache.cache_get_many(list(keys))
    missing = {key: render(item) for key, item in keys.items() if key not in found}
    if missing:
        state_cache.cache_set_many(missing, timeout)
    found.update(missing)
    return {key: fill(found[key]) for key in keys}
