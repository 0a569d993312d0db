"""While PostgreSQL is away: a 503 with ``Retry-After``, never a 500 with a traceback.

A request that cannot reach the database (the server restarts, the network drops, every
connection slot is taken) raises Django's ``OperationalError`` or ``InterfaceError``
somewhere in the view: loading the session or the token's user, reading, or writing in a
service's transaction, which then rolls back whole. Nothing was changed, so the honest
answer is "try again shortly": under ``/api/`` a JSON body in the API's error shape, on the
pages a plain page that needs nothing from the database (no navigation, no user).

Nothing needs restarting when the database returns: Django opens a new connection for the
next request (``CONN_HEALTH_CHECKS`` drops a kept one that broke), and the scheduler's next
pass (beat's safety net, every few seconds) catches up with what was submitted before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

log = logging.getLogger(__name__)

# Seconds a client should wait before trying again: about how long a PostgreSQL restart
# takes, and what the scheduler's safety net needs to pick up again.
RETRY_AFTER_SECONDS = 5
API_PREFIX = "/api/"
MESSAGE = (
    "The database is unavailable at the moment; nothing was changed. "
    f"Try again in {RETRY_AFTER_SECONDS} seconds."
)


def database_unavailable_response(request: HttpRequest) -> HttpResponse:
    """The 503 answer for ``request``: JSON under ``/api/``, a plain page elsewhere."""
    response: HttpResponse
    if request.path.startswith(API_PREFIX):
        response = JsonResponse({"detail": [MESSAGE]}, status=503)
    else:
        # No request context: the navigation and the user would need the database.
        html = render_to_string(
            "errors/database_unavailable.html",
            {"message": MESSAGE, "retry_after": RETRY_AFTER_SECONDS, "path": request.path},
        )
        response = HttpResponse(html, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailableMiddleware:
    """Turns a database connection failure raised by a view into the 503 answer."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        # One line, no traceback: during an outage every request lands here.
        log.warning("database unavailable for %s %s: %s", request.method, request.path, exception)
        return database_unavailable_response(request)
