"""Time windows ``[from, to)`` for the signals and the history export, checked at the edge.

Both read a queue's recorded history over a window; an unbounded window would read every
job ever run, so it is bounded (``MAX_WINDOW_DAYS``) and every problem is a field error
naming ``from`` or ``to`` and the rule, never a 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from governance.services.errors import ValidationFailed

MAX_WINDOW_DAYS = 31
DEFAULT_WINDOW = timedelta(days=1)
GROUP_BY = ("share", "team")
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Window:
    start: datetime
    stop: datetime


def _moment(value: Any, field: str, errors: dict[str, list[str]]) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or len(value) > 64:
        errors[field] = ["Give an ISO 8601 date or date and time, e.g. 2025-01-06T09:00:00Z."]
        return None
    try:
        moment = parse_datetime(value)
        if moment is None:
            day = parse_date(value)
            moment = datetime(day.year, day.month, day.day) if day else None
    except (ValueError, OverflowError):
        moment = None
    if moment is None:
        errors[field] = [f"{value!r} is not an ISO 8601 date or date and time."]
        return None
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    if not EARLIEST <= moment < LATEST:
        errors[field] = ["Must be between the years 2000 and 2099."]
        return None
    return moment


def parse_window(params: Mapping[str, Any], *, now: datetime | None = None) -> Window:
    """``from`` and ``to`` of a request (default: the last day up to now)."""
    errors: dict[str, list[str]] = {}
    start = _moment(params.get("from"), "from", errors)
    stop = _moment(params.get("to"), "to", errors)
    if errors:
        raise ValidationFailed(errors)
    now = now or timezone.now()
    stop = stop or (start + DEFAULT_WINDOW if start else now)
    start = start or stop - DEFAULT_WINDOW
    if start >= stop:
        raise ValidationFailed({"to": ["The end of the window must be after its start."]})
    if stop - start > timedelta(days=MAX_WINDOW_DAYS):
        raise ValidationFailed({"to": [f"The window may span at most {MAX_WINDOW_DAYS} days."]})
    return Window(start, stop)


def parse_group_by(value: Any) -> str:
    if value in (None, ""):
        return "share"
    if value not in GROUP_BY:
        raise ValidationFailed({"group_by": [f"Must be one of {', '.join(GROUP_BY)}."]})
    return str(value)


def parse_month(value: Any, *, now: datetime | None = None) -> Window:
    """``YYYY-MM`` as the window of that calendar month (UTC); default this month."""
    now = now or timezone.now()
    if value in (None, ""):
        year, month = now.year, now.month
    else:
        parts = value.split("-") if isinstance(value, str) and len(value) == 7 else []
        if len(parts) != 2 or not all(p.isdecimal() for p in parts):
            raise ValidationFailed({"month": ["Give a month as YYYY-MM, e.g. 2025-01."]})
        year, month = int(parts[0]), int(parts[1])
        if not 1 <= month <= 12 or not 2000 <= year <= 2099:
            raise ValidationFailed({"month": ["Month 01 to 12 of a year 2000 to 2099."]})
    start = datetime(year, month, 1, tzinfo=UTC)
    stop = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return Window(start, stop)
