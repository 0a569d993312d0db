"""``Server-Timing: app;dur=<ms>`` on every response: how long Django took to answer.

The W3C Server-Timing header (shown by browsers' developer tools, read by load tests such
as ``bench/web.py``) gives the time from the request entering this middleware to the
response leaving it: views, queries, template rendering and the middleware below it,
without the network, the WSGI server's queueing or HTTP parsing. It is placed first in
``MIDDLEWARE`` so it covers the whole stack. Cost: two clock reads and one header.
Streaming responses get the time to their first byte (their body is produced later).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase


class ServerTimingMiddleware:
    """Adds ``Server-Timing: app;dur=<ms>`` (milliseconds, one decimal) to each response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed_ms = (time.perf_counter() - started) * 1000
        entry = f"app;dur={elapsed_ms:.1f}"
        existing = response.get("Server-Timing")
        response["Server-Timing"] = f"{existing}, {entry}" if existing else entry
        return response
