"""Usage history charts drawn on the server as SVG: no script, no library, no CDN.

A chart is readable without hovering: its axes carry the scale and the window's start
and end, and the figures it shows are written out beside it as averages and
instance-hours. Areas are stacked in the order of the overview's bars: own use, borrowed,
lent out (idle entitlement borrowers used), idle and not lent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 640, 150
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 8, 22
# (figure, css class, label). "idle" is drawn net of "lent" (lent is part of idle).
LAYERS = (
    ("own", "own", "own use"),
    ("borrowed", "borrowed", "borrowed"),
    ("lent", "lent", "lent out"),
    ("idle", "idle-lend", "idle, not lent"),
)


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


def _stamp(moment: datetime, step: int) -> str:
    return moment.strftime("%b %d %H:%M" if step >= 900 else "%H:%M") + " UTC"


def usage_chart(series: dict[str, Any], *, step: int, title: str) -> SafeString:
    """One type's history (``selectors.insight.usage_history``'s ``types`` entry) as an
    SVG of stacked areas, with its axes."""
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
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = len(points)

    def x(i: int) -> float:
        return LEFT + plot_w * i / n

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    parts = [
        f'<svg class="history-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    # Whole pixels: the chart is 640 x 150, finer coordinates only cost bytes and time.
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
    axis_y = TOP + plot_h
    parts += [
        f'<line class="axis" x1="{LEFT}" y1="{axis_y}" x2="{WIDTH - RIGHT}" y2="{axis_y}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{axis_y}"/>',
        f'<line class="grid" x1="{LEFT}" y1="{TOP}" x2="{WIDTH - RIGHT}" y2="{TOP}"/>',
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{top:g}</text>',
        f'<text class="tick" x="{LEFT - 4}" y="{axis_y}" text-anchor="end">0</text>',
        f'<text class="tick" x="{LEFT}" y="{HEIGHT - 6}">{_stamp(points[0]["at"], step)}</text>',
        f'<text class="tick" x="{WIDTH - RIGHT}" y="{HEIGHT - 6}" text-anchor="end">now</text>',
        "</svg>",
    ]
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
                "svg": usage_chart(series, step=history["step"], title=title),
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


def promise_chart(evaluations: list[Any], *, threshold: float, title: str) -> SafeString:
    """A promise's evaluations, oldest first, as a small SVG: the value of each (a dot
    coloured by its state, a hollow one at the threshold when there was no data) joined
    by a line, and the threshold dashed across."""
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
        f'text-anchor="end">{threshold:g}</text>',
    ]
    line = [
        f"{x(i):.1f},{y(e.value):.1f}" for i, e in enumerate(evaluations) if e.value is not None
    ]
    if len(line) > 1:
        parts.append(f'<polyline class="line" points="{" ".join(line)}"/>')
    for i, e in enumerate(evaluations):
        at = y(e.value if e.value is not None else threshold)
        shown = "no data" if e.value is None else f"{e.value:g}"
        parts.append(
            f'<circle class="{escape(e.state)}" cx="{x(i):.1f}" cy="{at:.1f}" r="3">'
            f"<title>{e.window_stop:%Y-%m-%d %H:%M} UTC: {shown} ({escape(e.state)})</title>"
            "</circle>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))
