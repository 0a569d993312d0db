"""The overview page: every queue's entitlement against usage, and the live decision feed.

The page includes two live regions (``usage`` and ``feed``); each has one endpoint that
renders the same partial, polled every two seconds by htmx. The page and the endpoints
share one cached rendering of each region (``usage_html``, ``feed_html``), keyed by the
stored state it shows, so a page load costs what a poll costs.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString

from governance.selectors import decisions as decision_selectors
from governance.selectors import insight, state_cache
from governance.web import agreements as agreement_pages
from governance.web import charts, regions
from governance.web.presenters import overview as web_overview

FEED_CACHE_SECONDS = 300.0


def usage_html() -> SafeString:
    """The ``usage`` region, cached under the state it shows (``state_cache``): when nothing
    changed it costs one query."""
    return regions.template_region(
        f"usage-html:{state_cache.queue_state_fingerprint()}",
        "overview/overview.html#usage",
        lambda: {"queues": web_overview.usage_blocks(web_overview.overview_queues())},
    )


def feed_html() -> SafeString:
    """The ``feed`` region, cached under ``web_overview.feed_state()`` (the ids of the
    entries it lists and the names it may show: one index-only query)."""
    return regions.template_region(
        f"feed-html:{web_overview.feed_state()}",
        "overview/overview.html#feed",
        lambda: {"feed": web_overview.feed()},
        FEED_CACHE_SECONDS,
    )


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    # Every queue's usage history summed per type: one query (selectors.insight).
    history = insight.usage_history(queue_id=None, window_key=request.GET.get("history"))
    context = {
        "usage_html": usage_html(),
        "feed_html": feed_html(),
        **charts.history_context(history, "All queues"),
        **agreement_pages.attention_context(),
        # Jobs failed by their retry limit whose teams' leads have not yet decided.
        "open_decisions": list(decision_selectors.open_decisions()[:20]),
    }
    return render(request, "overview/overview.html", context)


@login_required
def usage_partial(request: HttpRequest) -> HttpResponse:
    """Polled every 2 s by every open overview (see ``usage_html``)."""
    return HttpResponse(usage_html())


@login_required
def feed_partial(request: HttpRequest) -> HttpResponse:
    """Polled every 2 s by every open overview (see ``feed_html``)."""
    return HttpResponse(feed_html())
