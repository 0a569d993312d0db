"""``/metrics``: the Prometheus endpoint for operators (governance/metrics.py says what
it exposes and where each figure comes from; docs/operations.md how to scrape it).

Who may read it: a scraper presenting ``Authorization: Bearer <METRICS_TOKEN>`` (when
that setting is set), or a signed-in admin or staff user (to look at it in a browser).
Anyone else gets 403: the figures name every team and share.
"""

from __future__ import annotations

import hmac
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from governance import metrics as store
from governance import roles
from governance.models import JobQueue
from governance.selectors import capacity as capacity_selectors
from governance.selectors import insight, state_cache

FORECAST_ERROR_WINDOW = timedelta(days=30)


def _allowed(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header.removeprefix("Bearer ").encode(), token.encode())
    user = request.user
    return bool(user.is_authenticated and (user.is_staff or roles.is_admin(user)))


def _forecast_errors() -> dict[str, dict[str, Any]]:
    names = dict(JobQueue.objects.values_list("pk", "name"))
    since = timezone.now() - FORECAST_ERROR_WINDOW
    return {
        names[queue_id]: figures
        for queue_id, figures in insight.forecast_error_by_queue(since=since).items()
        if queue_id in names
    }


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    if not _allowed(request):
        return HttpResponse(
            "Metrics need a bearer token (METRICS_TOKEN) or an admin sign-in.\n",
            status=403,
            content_type="text/plain",
        )
    # The gauges are the pages' usage figures, cached under the stored state like them;
    # the forecast errors change only when a job starts, a change of that state too.
    fingerprint = state_cache.queue_state_fingerprint()
    usage = state_cache.cached(
        f"metrics-usage:{fingerprint}",
        lambda: capacity_selectors.queues_usage(list(JobQueue.objects.order_by("name"))),
    )
    errors = state_cache.cached(f"metrics-forecast-error:{fingerprint}", _forecast_errors)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(store.Collector(usage, store.read_counters(), errors))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
