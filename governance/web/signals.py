"""The Signals page: does sharing turn idle capacity into finished work without costing
owners their predictable access? Charts and the figures of docs/signals.md for one queue over a
window, per share or team, every figure linking to the jobs or audit entries behind it,
and the month's chargeback. The filter form works without JavaScript; with htmx it
swaps only the results."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from governance.selectors import capacity as capacity_selectors
from governance.selectors import scheduling
from governance.selectors.filters import Links
from governance.selectors.windows import parse_group_by, parse_month, parse_window
from governance.services.errors import ValidationFailed
from governance.web.presenters import signals as sel

PRESETS = [("1h", "Last hour", 1 / 24), ("1d", "Last day", 1), ("7d", "Last 7 days", 7)]
PRESETS.append(("30d", "Last 30 days", 30))


@login_required
def signals_page(request: HttpRequest) -> HttpResponse:
    params = request.GET
    queues = list(capacity_selectors.queues().values_list("pk", "name"))
    context: dict[str, Any] = {"queues": queues, "presets": PRESETS, "errors": {}}
    queue_key = params.get("queue") or (str(queues[0][0]) if queues else "")
    queue = (
        capacity_selectors.queue(int(queue_key))
        if queue_key.isdecimal() and len(queue_key) < 12
        else None
    )
    window_params = {"from": params.get("from"), "to": params.get("to")}
    preset = params.get("preset") or ("" if params.get("from") else "1d")
    now = timezone.now()
    for key, _, days in PRESETS:
        if preset == key:
            window_params = {
                "from": (now - timedelta(days=days)).isoformat(),
                "to": now.isoformat(),
            }
    context.update(
        {
            "queue": queue,
            "preset": preset,
            "group_by": params.get("group_by") or "share",
            "from_value": params.get("from") or "",
            "to_value": params.get("to") or "",
        }
    )
    if queue is None:
        if queues:
            context["errors"] = {"queue": ["Choose a queue."]}
    else:
        try:
            window = parse_window(window_params, now=now)
            group_by = parse_group_by(params.get("group_by"))
        except ValidationFailed as exc:
            context["errors"] = exc.errors
        else:
            answer = scheduling.queue_signals(queue, window.start, window.stop, group_by=group_by)
            links = Links(queue.pk, window.start, window.stop)
            month = parse_month(None, now=window.start)
            context.update(
                {
                    "window": window,
                    "answer": answer,
                    "charts": sel.charts(answer, links, queue.pk),
                    "figures": sel.figure_rows(answer, links, queue.pk),
                    "columns": [label for label, _ in sel.group_scopes(answer, queue.pk)],
                    "api_query": f"queue={queue.pk}&from={window.start.isoformat()}"
                    f"&to={window.stop.isoformat()}&group_by={group_by}",
                    "month": month.start.strftime("%Y-%m"),
                    "chargeback": scheduling.chargeback(month.start, month.stop),
                }
            )
    if request.headers.get("HX-Request"):
        return render(request, "signals/page.html#results", context)
    return render(request, "signals/page.html", context)
