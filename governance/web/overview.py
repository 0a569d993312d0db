"""The overview page: every queue's entitlement against usage, and the live decision feed.

The page includes two live regions (``usage`` and ``feed``); each has one endpoint that
renders the same partial, polled every two seconds by htmx. The page and the endpoints
share one cached rendering of each region (``usage_html``, ``feed_html``), keyed by the
stored state it shows, so a page load costs what a poll costs.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from governance.selectors import web_overview, web_state
from governance.templatetags import web_time

FEED_CACHE_SECONDS = 300.0


def _usage_context() -> dict[str, Any]:
    return {"queues": web_overview.usage_blocks(web_overview.overview_queues())}


def usage_html() -> SafeString:
    """The ``usage`` region, cached under the state it shows (``web_state``): when nothing
    changed it costs one query."""
    key = f"usage-html:{web_state.queue_state_fingerprint()}"
    html = web_state.cached(
        key, lambda: render_to_string("overview/overview.html#usage", _usage_context())
    )
    return mark_safe(html)


def feed_html() -> SafeString:
    """The ``feed`` region. Cached under ``web_overview.feed_state()`` (the ids of the
    entries it lists and the names it may show: one index-only query). Its relative
    times ("3 minutes ago") move with the clock, so the cached HTML is reused only while
    every item's relative time reads the same as when it was rendered; otherwise it is
    rendered again from the cached items (no feed query)."""
    key = f"feed-html:{web_overview.feed_state()}"
    found = web_state.cache_get_many([key]).get(key)
    if found is not None:
        items, agos, html = found
        if tuple(web_time.relative_time(item.at) for item in items) == agos:
            return mark_safe(html)
    else:
        items = web_overview.feed()
    agos = tuple(web_time.relative_time(item.at) for item in items)
    html = render_to_string("overview/overview.html#feed", {"feed": items})
    web_state.cache_set_many({key: (items, agos, html)}, FEED_CACHE_SECONDS)
    return mark_safe(html)


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return render(
        request, "overview/overview.html", {"usage_html": usage_html(), "feed_html": feed_html()}
    )


@login_required
def usage_partial(request: HttpRequest) -> HttpResponse:
    """Polled every 2 s by every open overview (see ``usage_html``)."""
    return HttpResponse(usage_html())


@login_required
def feed_partial(request: HttpRequest) -> HttpResponse:
    """Polled every 2 s by every open overview (see ``feed_html``)."""
    return HttpResponse(feed_html())
