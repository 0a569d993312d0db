"""The Signals page: does sharing turn idle capacity into finished work without costing
owners their predictable access? Charts and the figures of docs/signals.md for one queue over a
window, per share or team, every figure linking to the jobs or audit entries behind it,
and the month's chargeback. The filter form works without JavaScript; with htmx it
swaps only the results."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from governance.selectors import capacity as capacity_selectors
from governance.selectors import scheduling
from governance.selectors.filters import Links
from governance.selectors.windows import Window, parse_group_by, parse_month, parse_window
from governance.services.errors import ValidationFailed
from governance.web import regions
from governance.web.presenters import signals as sel

PRESETS = [("1h", "Last hour", 1 / 24), ("1d", "Last day", 1), ("7d", "Last 7 days", 7)]
PRESETS.append(("30d", "Last 30 days", 30))


@login_required
def signals_page(request: HttpRequest) -> HttpResponse:
    """A preset window ("last day") or one whose end is not 5 minutes past shows the
    answer kept for it, as of its time (docs/signals.md#windows-that-end-now): the
    recording up to now costs seconds of work on a busy queue. While the first answer of
    a window is being computed elsewhere, the results say so and poll (htmx)."""
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
    span: timedelta | None = None
    for key, _, days in PRESETS:
        if preset == key:
            span = timedelta(days=days)
            window_params = {"from": (now - span).isoformat(), "to": now.isoformat()}
    context.update(
        {
            "queue": queue,
            "preset": preset,
            "group_by": params.get("group_by") or "share",
            "from_value": params.get("from") or "",
            "to_value": params.get("to") or "",
            "poll_query": request.GET.urlencode(),
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
            context.update(_results(queue, window, group_by, span))
    key = context.pop("results_key", None)
    if key is not None:
        # a kept answer: its results are the same HTML until it is recomputed
        results = regions.template_region(
            key, RESULTS, lambda: {**context, **_shapes(queue, context)}, RESULTS_SECONDS
        )
    else:
        shapes = _shapes(queue, context) if "answer" in context else {}
        results = regions.fill(regions.render_with_slots(RESULTS, {**context, **shapes}))
    if request.headers.get("HX-Request"):
        return HttpResponse(results)
    return render(request, "signals/page.html", {**context, "results_html": results})


# The results of a kept answer (a window that ends now) are rendered once per answer: the
# answer is named by its queue, grouping, window and "as of", the chargeback's likewise
# (web/regions.py: relative times are slots written at each serving).
RESULTS = "signals/page.html#results"
RESULTS_VERSION = 1
RESULTS_SECONDS = 15 * 60.0


def _results_key(
    queue_id: int,
    group_by: str,
    window: Window,
    live: Any,
    month: Window,
    chargeback: Any,
) -> str:
    """The results' cache key: what names their answer and their chargeback's."""
    text = (
        f"{settings.DATABASES['default']['NAME']}|{queue_id}|{group_by}|{window.start}|"
        f"{window.stop}|{live.as_of}|{month.start}|{chargeback.as_of}|{chargeback.answer is None}"
    )
    return f"signals-results:{RESULTS_VERSION}:{hashlib.sha256(text.encode()).hexdigest()}"


def _shapes(queue: Any, context: dict[str, Any]) -> dict[str, Any]:
    """What the results draw from the answer: charts, the figures table, its columns."""
    answer, window = context["answer"], context["window"]
    links = Links(queue.pk, window.start, window.stop)
    return {
        "charts": sel.charts(answer, links, queue.pk),
        "figures": sel.figure_rows(answer, links, queue.pk),
        "columns": [label for label, _ in sel.group_scopes(answer, queue.pk)],
    }


def _results(queue: Any, window: Window, group_by: str, span: timedelta | None) -> dict[str, Any]:
    """The results' context: the answer (as of its time when the window ends now), its
    charts and figures, and the month's chargeback; ``computing`` while the first answer
    of the window is computed elsewhere."""
    live = scheduling.queue_signals_as_of(
        queue, window.start, window.stop, group_by=group_by, span=span
    )
    if live.answer is None:
        return {"computing": True, "window": window}
    answer = live.answer
    # the window the answer counts (a rolling window ends at its "as of")
    window = Window(
        datetime.fromisoformat(answer["window"]["from"]),
        datetime.fromisoformat(answer["window"]["to"]),
    )
    month = parse_month(None, now=window.start)
    chargeback = scheduling.chargeback_as_of(month.start, month.stop)
    kept = live.as_of is not None and (chargeback.answer is None or chargeback.as_of is not None)
    return {
        "results_key": _results_key(queue.pk, group_by, window, live, month, chargeback)
        if kept
        else None,
        "window": window,
        "answer": answer,
        "as_of": live.as_of,
        "api_query": f"queue={queue.pk}&from={window.start.isoformat()}"
        f"&to={window.stop.isoformat()}&group_by={group_by}",
        "month": month.start.strftime("%Y-%m"),
        "chargeback": (chargeback.answer or {}).get("rows", []),
        "chargeback_computing": chargeback.answer is None,
        "chargeback_as_of": chargeback.as_of,
    }
