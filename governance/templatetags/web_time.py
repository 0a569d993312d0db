"""``{% when t %}``: a time shown relative ("3 minutes ago", "in 2 days") with the
absolute time in its title, as one tag instead of an included partial per row.

List pages show a time on each of their 50-100 rows. Django's ``timesince`` costs
0.1-0.3 ms a call (lazy translated strings, ``ngettext``, ``avoid_wrapping``, a
``gettext`` join), a large share of those pages' render time; ``relative_time`` below is
the same words from plain Python arithmetic (the site is English only:
``LANGUAGE_CODE = "en-us"``, ``USE_I18N`` adds nothing here). Its output is what
``timesince`` gave — up to two adjacent units out of years, months (calendar), weeks,
days, hours and minutes, a no-break space between number and unit, "just now" under a
minute — and a future time reads "in ..." instead of timesince's "0 minutes".
"""

from __future__ import annotations

import functools
import html
import re
from datetime import datetime, tzinfo

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

_UNITS = ("year", "month", "week", "day", "hour", "minute")
_CHUNKS = (7 * 86400, 86400, 3600, 60)  # week, day, hour, minute
_MONTHS_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_NBSP = "\xa0"


# Under 27 days apart no calendar month lies between two times (the shortest month has
# 28 days of wall time, and no time zone's change of offset ever took more than one):
# the words are then the seconds between them in weeks, days, hours and minutes, without
# the calendar arithmetic below (most times on a page are that close).
_NO_MONTH_SECONDS = 27 * 86400


def span_words(earlier: datetime, later: datetime, depth: int = 2) -> str:
    """``timesince(earlier, later, depth=depth)``'s words (earlier < later); "" under a minute."""
    remaining = (later - earlier).total_seconds()
    if remaining < _NO_MONTH_SECONDS:
        return _words(_UNITS[2:], _chunked(remaining), depth)
    total_months = (later.year - earlier.year) * 12 + (later.month - earlier.month)
    if earlier.day > later.day or (earlier.day == later.day and earlier.time() > later.time()):
        total_months -= 1
    years, months = divmod(total_months, 12)
    pivot = earlier
    if years or months:
        pivot_year = earlier.year + years
        pivot_month = earlier.month + months
        if pivot_month > 12:
            pivot_month -= 12
            pivot_year += 1
        pivot = earlier.replace(
            year=pivot_year,
            month=pivot_month,
            day=min(_MONTHS_DAYS[pivot_month - 1], earlier.day),
            microsecond=0,
        )
    return _words(_UNITS, [years, months, *_chunked((later - pivot).total_seconds())], depth)


def _chunked(remaining: float) -> list[int]:
    """``remaining`` seconds as whole weeks, days, hours and minutes."""
    weeks, left = divmod(int(remaining), _CHUNKS[0])
    days, left = divmod(left, _CHUNKS[1])
    hours, left = divmod(left, _CHUNKS[2])
    return [weeks, days, hours, left // _CHUNKS[3]]


def _words(units: tuple[str, ...], parts: list[int], depth: int) -> str:
    words: list[str] = []
    for unit, value in zip(units, parts, strict=True):
        if value:
            words.append(f"{value}{_NBSP}{unit}{'' if value == 1 else 's'}")
            if len(words) == depth:
                break
        elif words:
            break  # only adjacent units: "1 year, 5 days" is never said
    return ", ".join(words)


def relative_time(t: datetime, now: datetime | None = None) -> str:
    """ "2 hours, 5 minutes ago" / "in 3 days" / "just now" (within a minute)."""
    if now is None:
        now = datetime.now(t.tzinfo if timezone.is_aware(t) else None)
    elif now.tzinfo is not t.tzinfo and timezone.is_aware(now) and timezone.is_aware(t):
        now = now.astimezone(t.tzinfo)
    if t <= now:
        words = span_words(t, now)
        return f"{words} ago" if words else "just now"
    words = span_words(now, t)
    return f"in {words}" if words else "just now"


SLOT = "<!--when-->"
# What a slot holds: the time, or (time, is an estimated start).
Slot = datetime | tuple[datetime, bool]
# An estimated start this close (or already past) is the next scheduling cycle's: "just
# now" or "in 20 seconds" would read as if it had started.
NEXT_CYCLE_WORDS = "at the next scheduling cycle"


def time_html(
    t: datetime, *, estimate: bool = False, now: datetime | None = None, zone: tzinfo | None = None
) -> SafeString:
    """``<time>`` with the relative words and the absolute time in its title; with
    ``estimate``, a start due within a minute (or past) reads NEXT_CYCLE_WORDS.
    ``now`` and ``zone`` (the current time zone): given by a caller writing many times
    at once (``fill_slots``), which would otherwise look each up again per time."""
    now = now or timezone.now()
    return mark_safe(_time_text(t, estimate, now, zone or timezone.get_current_timezone()))


def _time_text(t: datetime, estimate: bool, now: datetime, zone: tzinfo) -> str:
    """``time_html``'s text (a str: a page writing 150 times joins them first). A naive
    ``t`` is shown as it is and compared with the naive time now."""
    if timezone.is_aware(t):
        iso, absolute = _absolute(t, zone)
    else:
        iso, absolute = _absolute(t, None)
        now = datetime.now()
    words = relative_time(t, now)
    if estimate and (t - now).total_seconds() < 60:
        words = NEXT_CYCLE_WORDS
    return f'<time datetime="{iso}" title="{absolute}">{html.escape(words)}</time>'


@functools.lru_cache(maxsize=8192)
def _absolute(t: datetime, zone: tzinfo | None) -> tuple[str, str]:
    """The ISO time and the title's absolute time of ``t`` shown in ``zone``: the same
    at every serving of a cached page, so formatted once per process (an aware time's
    instant and the zone decide both, whatever zone ``t`` was read in)."""
    shown = t.astimezone(zone) if zone is not None else t
    # Neither the ISO time nor the strftime output can hold markup.
    # The title names its time zone (the configured one, "UTC" by default).
    return shown.isoformat(), shown.strftime("%Y-%m-%d %H:%M:%S %Z").rstrip()


def _slot_or_html(
    context: template.Context, t: datetime | None, estimate: bool
) -> SafeString | str:
    if not isinstance(t, datetime):
        return ""
    slots = context.get("when_slots")
    if slots is not None:
        slots.append((t, estimate) if estimate else t)
        return mark_safe(SLOT)
    return time_html(t, estimate=estimate)


@register.simple_tag(name="when", takes_context=True)
def when(context: template.Context, t: datetime | None) -> SafeString | str:
    """The time as ``time_html``; when the context has a ``when_slots`` list (HTML to be
    cached), a SLOT marker instead, its time appended to the list: ``fill_slots``
    writes the words current at each serving."""
    return _slot_or_html(context, t, False)


@register.simple_tag(name="estimated_start", takes_context=True)
def estimated_start(context: template.Context, t: datetime | None) -> SafeString | str:
    """A pending job's estimated start, as ``when`` but "at the next scheduling cycle"
    when it is due within a minute or already past."""
    return _slot_or_html(context, t, True)


def fill_slots(html_in: str, times: list[Slot]) -> SafeString:
    """HTML rendered with ``when_slots``, each slot replaced by its time's ``time_html``
    (all as of one instant, in one time zone)."""
    parts = html_in.split(SLOT)
    if len(parts) != len(times) + 1:
        raise ValueError("the slots and their times do not match")
    now, zone = timezone.now(), timezone.get_current_timezone()
    out = [parts[0]]
    for t, part in zip(times, parts[1:], strict=True):
        at, estimate = t if isinstance(t, tuple) else (t, False)
        out.append(_time_text(at, estimate, now, zone))
        out.append(part)
    return mark_safe("".join(out))


# A slot that carries its own time: what a cached region already rendered (with SLOT
# markers) becomes when it is written into a larger cached fragment (web/fragments.py),
# whose own slot list cannot take the region's times in order. ``fill_inline`` writes
# them at each serving. Stored text cannot imitate one: HTML escaping turns its "<".
_INLINE = re.compile(r"<!--when@([0-9T:.+\- ]+)\|([01])-->")


def inline_slots(html_in: str, times: list[Slot]) -> str:
    """HTML rendered with ``when_slots``, each slot replaced by one naming its time."""
    parts = html_in.split(SLOT)
    if len(parts) != len(times) + 1:
        raise ValueError("the slots and their times do not match")
    out = [parts[0]]
    for t, part in zip(times, parts[1:], strict=True):
        at, estimate = t if isinstance(t, tuple) else (t, False)
        out.append(f"<!--when@{at.isoformat()}|{int(estimate)}-->")
        out.append(part)
    return "".join(out)


def fill_inline(html_in: str) -> str:
    """``inline_slots``'s slots written as ``time_html`` as of now."""
    if "<!--when@" not in html_in:
        return html_in
    now, zone = timezone.now(), timezone.get_current_timezone()
    return _INLINE.sub(
        lambda m: _time_text(_inline_time(m.group(1)), m.group(2) == "1", now, zone), html_in
    )


@functools.lru_cache(maxsize=8192)
def _inline_time(iso: str) -> datetime:
    return datetime.fromisoformat(iso)
