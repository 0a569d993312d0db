"""One way to write the product's figures, on every page: durations, instance-hours,
money, counts, percentages and absolute times. Each is a template filter
(``{% load figures %}``, ``{{ job.duration|duration }}``) and a plain function the page
code calls for the text it builds (charts, the what-if comparison, the Signals figures),
so a figure reads the same wherever it is shown.

- ``duration`` (seconds): "45 s" under two minutes, "12 min" under two hours, "3.5 h"
  under two days, then "4.2 days": one unit per figure, never "2,342 s" beside "3.0 h".
- ``inst_hours`` (instance-hours): "3.5 h", "1,240 h", under an hour "25 min" (of
  instance time) and "under 1 min", never "0.0 h" beside a visible bar;
  ``inst_seconds`` the same from instance-seconds.
- ``money`` (dollars): "$1,234.56", a small amount above zero "under $0.01".
- ``count``: "1,234". ``percent`` (a fraction): "12.5 %". ``utc``: "2026-12-01 09:00 UTC".
- ``ratio`` (so many per something): "0.42".
- ``figure`` (a value and what it counts: ``seconds``, ``fraction``, ``count``, ``ratio``,
  ``money``): the one of the above that unit takes, e.g. a promise's value and threshold
  (``{{ value|figure:unit }}``).
Missing values (None) read "—".
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template

register = template.Library()

DASH = "—"


def _number(value: Any) -> float | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def duration(seconds: Any) -> str:
    value = _number(seconds)
    if value is None:
        return DASH
    sign, value = ("-" if value < 0 else ""), abs(value)
    if value < 120:
        text = f"{value:.0f} s"
    elif value < 7200:
        text = f"{value / 60:.0f} min"
    elif value < 48 * 3600:
        text = f"{value / 3600:.1f} h"
    else:
        text = f"{value / 86400:,.1f} days"
    return sign + text


@register.filter
def inst_hours(hours: Any) -> str:
    value = _number(hours)
    if value is None:
        return DASH
    if value == 0:
        return "0 h"
    if abs(value) < 1:
        minutes = abs(value) * 60
        return "under 1 min" if minutes < 0.5 else f"{value * 60:.0f} min"
    return f"{value:,.1f} h" if abs(value) < 100 else f"{value:,.0f} h"


@register.filter
def inst_seconds(seconds: Any) -> str:
    """Instance-seconds written as instance-hours (``inst_hours``)."""
    value = _number(seconds)
    return DASH if value is None else inst_hours(value / 3600)


@register.filter
def money(dollars: Any) -> str:
    value = _number(dollars)
    if value is None:
        return DASH
    if 0 < abs(value) < 0.005:
        return "under $0.01"
    return f"-${abs(value):,.2f}" if value < 0 else f"${value:,.2f}"


@register.filter
def count(value: Any) -> str:
    number = _number(value)
    if number is None:
        return DASH
    return f"{number:,.0f}" if number == int(number) else f"{number:,.1f}"


@register.filter
def percent(fraction: Any) -> str:
    value = _number(fraction)
    return DASH if value is None else f"{100 * value:.1f} %"


@register.filter
def ratio(value: Any) -> str:
    number = _number(value)
    return DASH if number is None else f"{number:,.2f}"


@register.filter
def figure(value: Any, unit: str) -> str:
    """``value`` written as what it counts (``unit``: seconds, fraction, count, ratio,
    money); a unit not known here writes it as a count."""
    return UNITS.get(unit, count)(value)


@register.filter
def utc(moment: Any) -> str:
    if not isinstance(moment, datetime):
        return DASH
    shown = moment.astimezone(UTC) if moment.tzinfo else moment
    return shown.strftime("%Y-%m-%d %H:%M") + " UTC"


UNITS = {
    "seconds": duration,
    "fraction": percent,
    "count": count,
    "ratio": ratio,
    "money": money,
}
