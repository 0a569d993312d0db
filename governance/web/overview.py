"""The overview page: every queue's entitlement against usage, and the live decision feed.

The page includes two live regions (``usage`` and ``feed``); each has one endpoint that
renders the same partial, polled every two seconds by htmx.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from governance.selectors import web_overview


def _usage_context() -> dict[str, Any]:
    return {"queues": web_overview.usage_blocks(web_overview.overview_queues())}


def _feed_context() -> dict[str, Any]:
    return {"feed": web_overview.feed()}


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "overview/overview.html", {**_usage_context(), **_feed_context()})


@login_required
def usage_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "overview/overview.html#usage", _usage_context())


@login_required
def feed_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "overview/overview.html#feed", _feed_context())
