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
from django.utils.safestring import SafeString

from governance.models import Decision, DecisionState
from governance.selectors import decisions as decision_selectors
from governance.selectors import state_cache
from governance.web import agreements as agreement_pages
from governance.web import charts, fragments, regions
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


# The rest of the page is a fragment (web/fragments.py) of what it reads: the agreements
# due for review, the open decisions (audited) and the broken promises (evaluated
# without an audit entry: the newest evaluation), all in ``state_cache.page_version``;
# the open decisions' rows (a reminder is marked on them without an audit entry:
# ``rows_version``). Agreements and decisions fall overdue with time alone
# (BUCKET_SECONDS). The live regions and the usage
# history are holes, each cached under its own state (``usage_html``, ``feed_html``,
# ``charts.history_html``). The same for every viewer.
BUCKET_SECONDS = 60


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    version = "|".join(
        (
            state_cache.page_version(),
            state_cache.rows_version(Decision, "state", DecisionState.OPEN.value),
        )
    )
    body = fragments.fragment(
        request,
        "overview",
        template="overview/overview.html#body",
        context=_body_context,
        version=version,
        viewer=fragments.Viewer.EVERYONE,
        bucket=BUCKET_SECONDS,
        holes={
            "usage": usage_html,
            "feed": feed_html,
            # Every queue's usage history summed per type: one query (selectors.insight).
            "history": lambda: charts.history_html(
                request, queue_id=None, share_ids=None, subject="All queues"
            ),
        },
    )
    return render(request, "overview/overview.html", {"body": body})


def _body_context() -> dict[str, Any]:
    return {
        "usage_html": fragments.hole("usage"),
        "feed_html": fragments.hole("feed"),
        "history_html": fragments.hole("history"),
        **agreement_pages.attention_context(),
        # Jobs failed by their retry limit whose teams' leads have not yet decided.
        "open_decisions": list(decision_selectors.open_decisions()[:20]),
    }


@login_required
def usage_partial(request: HttpRequest) -> HttpResponse:
    """Polled every 2 s by every open overview (see ``usage_html``)."""
    return HttpResponse(usage_html())


@login_required
def feed_partial(request: HttpRequest) -> HttpResponse:
    """Polled every 2 s by every open overview (see ``feed_html``)."""
    return HttpResponse(feed_html())
