"""``{% when %}``'s relative-time words (governance.templatetags.web_time): the fast
formatter says what Django's ``timesince`` said, and future times read "in ..."."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.template import Context, Template
from django.utils.timesince import timesince
from hypothesis import given, settings
from hypothesis import strategies as st

from governance.templatetags.web_time import relative_time

NOW = datetime(2026, 3, 31, 12, 0, 30, 250_000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(seconds=0), "just now"),
        (timedelta(seconds=-59), "just now"),
        (timedelta(seconds=59), "just now"),
        (timedelta(seconds=-61), "1\xa0minute ago"),
        (timedelta(minutes=-5, seconds=-10), "5\xa0minutes ago"),
        (timedelta(hours=-1), "1\xa0hour ago"),
        (timedelta(hours=-2, minutes=-3), "2\xa0hours, 3\xa0minutes ago"),
        (timedelta(days=-1, hours=-4), "1\xa0day, 4\xa0hours ago"),
        (timedelta(days=-3, minutes=-7), "3\xa0days ago"),  # only adjacent units
        (timedelta(days=-9), "1\xa0week, 2\xa0days ago"),
        (timedelta(days=-45), "1\xa0month, 2\xa0weeks ago"),
        (timedelta(days=-400), "1\xa0year, 1\xa0month ago"),
        (timedelta(minutes=5, seconds=1), "in 5\xa0minutes"),
        (timedelta(hours=3), "in 3\xa0hours"),
        (timedelta(days=3), "in 3\xa0days"),
        (timedelta(days=15, hours=1), "in 2\xa0weeks, 1\xa0day"),
    ],
)
def test_relative_time_words(delta: timedelta, expected: str) -> None:
    assert relative_time(NOW + delta, NOW) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),
    st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),
)
def test_past_times_read_as_timesince_did(a: datetime, b: datetime) -> None:
    t, now = sorted((a.replace(tzinfo=UTC), b.replace(tzinfo=UTC)))
    old = timesince(t, now)
    assert relative_time(t, now) == ("just now" if old == "0\xa0minutes" else f"{old} ago")


@settings(max_examples=100, deadline=None)
@given(st.timedeltas(min_value=timedelta(minutes=1), max_value=timedelta(days=800)))
def test_future_times_read_as_timeuntil(delta: timedelta) -> None:
    assert relative_time(NOW + delta, NOW) == f"in {timesince(NOW, NOW + delta)}"


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=40)),
)
def test_times_weeks_apart_read_as_timesince_did(t: datetime, delta: timedelta) -> None:
    """Around the shortcut for times under 27 days apart (no calendar month between)."""
    t = t.replace(tzinfo=UTC)
    old = timesince(t, t + delta)
    assert relative_time(t, t + delta) == ("just now" if old == "0\xa0minutes" else f"{old} ago")


def test_when_tag_keeps_the_absolute_time_in_its_title() -> None:
    t = datetime.now(UTC) - timedelta(hours=2, minutes=1, seconds=5)
    html = Template("{% load web_time %}{% when t %}").render(Context({"t": t}))
    assert html == (
        f'<time datetime="{t.isoformat()}" title="{t:%Y-%m-%d %H:%M:%S} UTC">'
        "2\xa0hours, 1\xa0minute ago</time>"
    )
    assert Template("{% load web_time %}{% when t %}").render(Context({"t": None})) == ""


@settings(max_examples=200, deadline=None)
@given(st.timedeltas(min_value=timedelta(days=-900), max_value=timedelta(days=900)))
def test_one_unit_relative_reads_as_before(delta: timedelta) -> None:
    """``presenters.governance.relative`` (one unit, plain spaces) still says what it said."""
    from django.utils.timesince import timeuntil

    from governance.web.presenters.governance import relative

    when = NOW + delta
    if abs(delta.total_seconds()) < 60:
        expected = "just now"
    elif when > NOW:
        expected = f"in {timeuntil(when, NOW, depth=1)}".replace("\xa0", " ")
    else:
        expected = f"{timesince(when, NOW, depth=1)} ago".replace("\xa0", " ")
    assert relative(when, NOW) == expected


def test_a_time_is_shown_in_each_requests_time_zone() -> None:
    """The absolute time is formatted once per time and zone: the same time written in
    another zone afterwards reads in that zone."""
    from django.utils import timezone

    from governance.templatetags.web_time import time_html

    t = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
    assert 'title="2026-01-15 12:00:00 UTC"' in time_html(t)
    with timezone.override("Europe/Paris"):
        assert 'title="2026-01-15 13:00:00 CET"' in time_html(t)
        assert 'datetime="2026-01-15T13:00:00+01:00"' in time_html(t)
    assert 'title="2026-01-15 12:00:00 UTC"' in time_html(t)
