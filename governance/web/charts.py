"""Usage history charts drawn on the server as SVG: no script, no library, no CDN.

A chart is readable without hovering and at any width: its scale of instances and a time
axis of round UTC times are HTML beside the plot (the plot stretches, the labels keep
their size), and the figures it shows are written out beside it as averages and
instance-hours. Areas are stacked in the order of the overview's bars: own use, borrowed,
lent out (idle entitlement borrowers used), idle and not lent.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# The plot's own coordinates: it stretches to its box (preserveAspectRatio none), so the
# labels are HTML beside it and stay readable at any width.
WIDTH, HEIGHT = 640, 120
# (figure, css class, label). "idle" is drawn net of "lent" (lent is part of idle).
LAYERS = (
    ("own", "own", "own use"),
    ("borrowed", "borrowed", "borrowed"),
    ("lent", "lent", "lent out"),
    ("idle", "idle-lend", "idle, not lent"),
)
# Time-axis tick spacings (seconds) to choose from: the smallest that gives at most
# MAX_TICKS ticks over the window.
TICK_STEPS: tuple[int, ...] = (300, 600, 900, 1800, 3600, 7200, 10800, 14400, 21600, 43200)
TICK_STEPS += (86400, 2 * 86400, 5 * 86400, 7 * 86400)
MAX_TICKS = 7


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^k at or above ``value`` (at least 1 instance)."""
    if value <= 1:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 <= value:
        magnitude *= 10
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= value:
            return float(factor * magnitude)
    return float(10 * magnitude)


def time_ticks(begin: datetime, end: datetime) -> list[tuple[float, str]]:
    """(percent of the window, label) of the time axis: round UTC times (every 4 hours
    over a day, every 10 minutes over an hour, every 5 days over 30), a day's date at
    midnight and on daily ticks."""
    span = (end - begin).total_seconds()
    if span <= 0:
        return []
    step = next((s for s in TICK_STEPS if span / s <= MAX_TICKS), TICK_STEPS[-1])
    first = -(-int(begin.timestamp()) // step) * step
    ticks = []
    for at in range(first, int(end.timestamp()) + 1, step):
        moment = datetime.fromtimestamp(at, tz=UTC)
        daily = step >= 86400 or (moment.hour == 0 and moment.minute == 0)
        label = moment.strftime("%b %d") if daily else moment.strftime("%H:%M")
        ticks.append((round(100 * (at - begin.timestamp()) / span, 2), label))
    return ticks


def usage_chart(
    series: dict[str, Any], *, begin: datetime, end: datetime, title: str
) -> SafeString:
    """One type's history (``selectors.insight.usage_history``'s ``types`` entry) as
    stacked areas (SVG) with a labelled scale of instances and a time axis of round UTC
    times (HTML, readable at any width)."""
    points = series["points"]
    if not points:
        return mark_safe("")
    stacks: list[list[float]] = []
    for p in points:
        idle_unlent = max(0.0, p["idle"] - p["lent"])
        values = [p["own"], p["borrowed"], p["lent"], idle_unlent]
        running, row = 0.0, []
        for value in values:
            running += value
            row.append(running)
        stacks.append(row)
    top = _nice_max(max(row[-1] for row in stacks))
    n = len(points)

    def x(i: int) -> float:
        return WIDTH * i / n

    def y(value: float) -> float:
        return HEIGHT * (1 - value / top)

    parts = [
        f'<div class="history-chart" role="img" aria-label="{escape(title)}">',
        '<div class="hc-y" aria-hidden="true">',
        f'<span style="top: 0%">{top:g}</span><span style="top: 50%">{top / 2:g}</span>',
        '<span style="top: 100%">0</span></div>',
        f'<svg class="hc-plot" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" '
        'xmlns="http://www.w3.org/2000/svg" aria-hidden="true">',
        f"<title>{escape(title)}</title>",
    ]
    # Whole units: finer coordinates only cost bytes and time.
    xs = [str(round(x(i))) for i in range(n + 1)]
    for layer, (_, css, _label) in enumerate(LAYERS):
        if not any(row[layer] - (row[layer - 1] if layer else 0.0) > 0 for row in stacks):
            continue
        upper = [str(round(y(row[layer]))) for row in stacks]
        lower = [str(round(y(row[layer - 1] if layer else 0.0))) for row in stacks]
        # A step outline: each step is drawn flat over its width (a rollup is an average
        # over the step, not a sample), along the top, then back along the bottom.
        path = [f"M{xs[0]},{upper[0]}"]
        for i in range(n):
            if i:
                path.append(f"V{upper[i]}")
            path.append(f"H{xs[i + 1]}")
        path.append(f"V{lower[n - 1]}")
        for i in range(n - 1, -1, -1):
            path.append(f"H{xs[i]}")
            if i:
                path.append(f"V{lower[i - 1]}")
        path.append("Z")
        parts.append(f'<path class="area {css}" d="{"".join(path)}"/>')
    for level in (0, HEIGHT // 2):
        parts.append(f'<line class="grid" x1="0" y1="{level}" x2="{WIDTH}" y2="{level}"/>')
    parts.append("</svg>")
    parts.append('<div class="hc-x" aria-hidden="true">')
    for at, label in time_ticks(begin, end):
        edge = ' class="at-start"' if at < 6 else ' class="at-end"' if at > 94 else ""
        parts.append(f'<span{edge} style="left: {at}%">{label}</span>')
    parts.append("</div>")
    parts.append('<div class="hc-unit" aria-hidden="true">instances</div>')
    parts.append("</div>")
    return mark_safe("".join(parts))


def chart_rows(history: dict[str, Any], subject: str) -> list[dict[str, Any]]:
    """Per type of ``history``: its name, chart and the figures written out (average
    instances over the window and instance-hours), for the history partial."""
    seconds = (history["end"] - history["begin"]).total_seconds()
    rows = []
    for series in history["types"]:
        title = f"{subject}: {series['name']} instances over the {history['label']}"
        hours = dict(series["hours"])
        hours["idle"] = max(0.0, hours["idle"] - hours["lent"])  # drawn net of lent
        figures = [
            {
                "css": css,
                "label": label,
                "hours": hours[name],
                "average": hours[name] * 3600 / seconds if seconds else 0.0,
            }
            for name, css, label in LAYERS
        ]
        rows.append(
            {
                "name": series["name"],
                "svg": usage_chart(series, begin=history["begin"], end=history["end"], title=title),
                "figures": figures,
            }
        )
    return rows


def history_context(history: dict[str, Any], subject: str) -> dict[str, Any]:
    """What ``templates/partials/usage_history.html`` renders."""
    from governance.selectors.insight import WINDOWS

    return {
        "usage_history": history,
        "history_rows": chart_rows(history, subject),
        "history_windows": [(w.key, w.label) for w in WINDOWS.values()],
    }


PROMISE_WIDTH, PROMISE_HEIGHT = 320, 80
PROMISE_LEFT, PROMISE_PAD = 40, 8


def promise_chart(
    evaluations: list[Any],
    *,
    threshold: float,
    title: str,
    written: Callable[[float | None], str] = lambda value: f"{value:g}",
) -> SafeString:
    """A promise's evaluations, oldest first, as a small SVG: the value of each (a dot
    coloured by its state, a hollow one at the threshold when there was no data) joined
    by a line, and the threshold dashed across; values and the threshold are ``written``
    as what the figure counts (a duration, a percentage)."""
    if not evaluations:
        return mark_safe("")
    values = [e.value for e in evaluations if e.value is not None]
    top = max([threshold, *values]) * 1.1 or 1.0
    plot_w = PROMISE_WIDTH - PROMISE_LEFT - PROMISE_PAD
    plot_h = PROMISE_HEIGHT - 2 * PROMISE_PAD
    n = len(evaluations)

    def x(i: int) -> float:
        return PROMISE_LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(value: float) -> float:
        return PROMISE_PAD + plot_h * (1 - value / top)

    parts = [
        f'<svg class="promise-chart" viewBox="0 0 {PROMISE_WIDTH} {PROMISE_HEIGHT}" '
        f'role="img" xmlns="http://www.w3.org/2000/svg" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<line class="threshold" x1="{PROMISE_LEFT}" y1="{y(threshold):.1f}" '
        f'x2="{PROMISE_WIDTH - PROMISE_PAD}" y2="{y(threshold):.1f}"/>',
        f'<text class="tick" x="{PROMISE_LEFT - 4}" y="{y(threshold) + 3:.1f}" '
        f'text-anchor="end">{escape(written(threshold))}</text>',
    ]
    line = [
        f"{x(i):.1f},{y(e.value):.1f}" for i, e in enumerate(evaluations) if e.value is not None
    ]
    if len(line) > 1:
        parts.append(f'<polyline class="line" points="{" ".join(line)}"/>')
    for i, e in enumerate(evaluations):
        at = y(e.value if e.value is not None else threshold)
        shown = "no data" if e.value is None else written(e.value)
        parts.append(
            f'<circle class="{escape(e.state)}" cx="{x(i):.1f}" cy="{at:.1f}" r="3">'
            f"<title>{e.window_stop:%Y-%m-%d %H:%M} UTC: {shown} ({escape(e.state)})</title>"
            "</circle>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))


# The usage history is drawn from the rollups every scheduling cycle adds to in place
# (``services.insight``), with no event or audit entry, in the transaction that rewrites
# its queue's usage level: its rendering is cached under those rows' version
# (``state_cache.usage_history_version``, the same for every viewer). The step in
# progress is averaged over the part of it that has passed, which moves with time
# alone: HISTORY_BUCKET_SECONDS bounds how long one rendering of it is served.
HISTORY_BUCKET_SECONDS = 10


def history_html(
    request: HttpRequest,
    *,
    queue_id: int | None,
    share_ids: list[int] | None,
    subject: str,
    history_id: int | None = None,
) -> SafeString:
    """``templates/partials/usage_history.html`` of the queue (None: every queue) and
    shares (None: all) over the window ``?history=`` names."""
    from governance.selectors import insight, state_cache
    from governance.web import fragments

    window = request.GET.get("history")

    def context() -> dict[str, Any]:
        history = insight.usage_history(queue_id=queue_id, window_key=window, share_ids=share_ids)
        return {**history_context(history, subject), "history_id": history_id}

    return fragments.fragment(
        request,
        "usage-history",
        template="partials/usage_history.html",
        context=context,
        version=state_cache.usage_history_version(),
        args=[queue_id, share_ids, window, subject, history_id],
        viewer=fragments.Viewer.EVERYONE,
        bucket=HISTORY_BUCKET_SECONDS,
    )
