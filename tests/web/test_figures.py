"""One way to write figures on every page (governance.templatetags.figures): the units
a reader sees for durations, instance-hours, money, counts and percentages."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.template import Context, Template

from governance.templatetags.figures import count, duration, inst_hours, money, percent, utc


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (0, "0 s"),
        (45, "45 s"),
        (119, "119 s"),
        (2342, "39 min"),  # not "2,342 s" beside "3.0 h"
        (7199, "120 min"),
        (3 * 3600, "3.0 h"),
        (47 * 3600, "47.0 h"),
        (5 * 86400, "5.0 days"),
        (-90, "-90 s"),
    ],
)
def test_duration(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("hours", "text"),
    [
        (0, "0 h"),
        (0.004, "under 1 min"),  # a visible bar never says "0.0 h"
        (0.04, "2 min"),
        (4.2, "4.2 h"),
        (1240.4, "1,240 h"),
    ],
)
def test_instance_hours(hours: float, text: str) -> None:
    assert inst_hours(hours) == text


def test_money_counts_percent_and_utc() -> None:
    assert money(1234.5) == "$1,234.50"
    assert money(0.001) == "under $0.01"
    assert money(0) == "$0.00"
    assert money(None) == "—"
    assert count(1234) == "1,234"
    assert percent(0.125) == "12.5 %"
    assert utc(datetime(2026, 12, 1, 9, 0, 30, 123456, tzinfo=UTC)) == "2026-12-01 09:00 UTC"


def test_the_filters_in_a_template() -> None:
    html = Template(
        "{% load figures %}{{ s|duration }} · {{ h|inst_hours }} · {{ d|money }}"
    ).render(Context({"s": 5400, "h": 3.25, "d": 12}))
    assert html == "90 min · 3.2 h · $12.00"
