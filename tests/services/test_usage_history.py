"""Usage history: the rollups the cycle writes and the history read from them, with
values worked out by hand.

Queue: 3 x ml.g5.xlarge. Share A (LEND, limit 2) runs one instance; share B
(LEND_AND_BORROW, limit 0 with unlimited borrowing) runs two. By the accounting function:
A own 1, idle 1; B borrowed 2. Capacity no share owns is 3 - 2 = 1, so one of B's two
borrowed instances sits on it and the other on A's idle: A lent 1.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from governance.models import UsageLevel, UsageRollup
from governance.selectors import insight
from governance.services.insight import Level, spread, usage_rebuild
from governance.web.charts import time_ticks, usage_chart
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, make_admin, make_job, make_lead, make_queue, make_share

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
T0 = datetime(2025, 1, 6, 9, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


@pytest.fixture
def live() -> Any:
    from types import SimpleNamespace

    queue = make_queue("history-q", {G5: 3})
    team_a, team_b = TeamFactory(name="team-a"), TeamFactory(name="team-b")
    a = make_share(queue, team_a, "a", {G5: 2}, policy="LEND")
    b = make_share(queue, team_b, "b", {G5: 0}, policy="LEND_AND_BORROW", borrow_limit=-1)
    lead_a, lead_b = make_lead(team_a, "lead_a"), make_lead(team_b, "lead_b")
    make_job(a, lead_a, name="a1", duration=10_000, submitted_at=T0)
    make_job(
        b,
        lead_b,
        name="b1",
        duration=10_000,
        submitted_at=T0,
        preferences=[{"instance_type": G5, "count": 2}],
    )
    return SimpleNamespace(queue=queue, a=a, b=b)


def rollups(width: int) -> dict[tuple[str, datetime], tuple[float, float, float, float]]:
    return {
        (r.share.name, r.start): (r.own, r.borrowed, r.lent, r.idle)
        for r in UsageRollup.objects.filter(width=width).select_related("share")
    }


def test_spread_cuts_an_interval_into_buckets_of_each_width() -> None:
    """2 own and 1 idle from 09:00:30 to 09:02:15: 30 s, 60 s and 15 s in minutes."""
    level = Level(share_id=1, instance_type_id=7, own=2, borrowed=0, lent=0, idle=1)
    out = spread([level], at(30), at(135))
    assert out[(1, 7, 60, at(0))] == [60.0, 0.0, 0.0, 30.0]
    assert out[(1, 7, 60, at(60))] == [120.0, 0.0, 0.0, 60.0]
    assert out[(1, 7, 60, at(120))] == [30.0, 0.0, 0.0, 15.0]
    assert out[(1, 7, 900, at(0))] == [210.0, 0.0, 0.0, 105.0]
    # T0 is 09:00 UTC: its six-hour bucket began at 06:00.
    assert out[(1, 7, 21600, at(-3 * 3600))] == [210.0, 0.0, 0.0, 105.0]
    assert len(out) == 5
    # Across a bucket edge: 08:59:00 to 09:01:00 is 60 s in each quarter.
    across = spread([level], at(-60), at(60), (900,))
    assert across == {
        (1, 7, 900, at(-900)): [120.0, 0, 0, 60.0],
        (1, 7, 900, at(0)): [120.0, 0, 0, 60.0],
    }


def test_the_cycle_writes_rollups_worked_out_by_hand(live: Any) -> None:
    run_cycle(live.queue.pk, now=at(0))  # starts a1 and b1; nothing to credit yet
    assert not UsageRollup.objects.exists()
    run_cycle(live.queue.pk, now=at(90))  # credits 09:00:00-09:01:30
    minutes = rollups(UsageRollup.MINUTE)
    assert minutes[("a", at(0))] == (60.0, 0.0, 60.0, 60.0)
    assert minutes[("a", at(60))] == (30.0, 0.0, 30.0, 30.0)
    assert minutes[("b", at(0))] == (0.0, 120.0, 0.0, 0.0)
    assert minutes[("b", at(60))] == (0.0, 60.0, 0.0, 0.0)
    quarters = rollups(UsageRollup.QUARTER)
    assert quarters == {
        ("a", at(0)): (90.0, 0.0, 90.0, 90.0),
        ("b", at(0)): (0.0, 180.0, 0.0, 0.0),
    }
    assert rollups(UsageRollup.SIX_HOURS)[("b", at(-3 * 3600))] == (0.0, 180.0, 0.0, 0.0)
    # A cycle within the same minute keeps its credit pending; the next minute's first
    # cycle adds it to the same buckets.
    run_cycle(live.queue.pk, now=at(100))
    assert rollups(UsageRollup.MINUTE)[("a", at(60))] == (30.0, 0.0, 30.0, 30.0)
    run_cycle(live.queue.pk, now=at(120))
    assert rollups(UsageRollup.MINUTE)[("a", at(60))] == (60.0, 0.0, 60.0, 60.0)
    assert UsageLevel.objects.get(queue=live.queue).since == at(120)


def test_history_averages_per_step(live: Any) -> None:
    run_cycle(live.queue.pk, now=at(0))
    run_cycle(live.queue.pk, now=at(90))
    whole = insight.usage_history(queue_id=live.queue.pk, window_key="hour", now=at(90))
    assert [t["name"] for t in whole["types"]] == [G5]
    points = whole["types"][0]["points"]
    assert len(points) == 60
    by_time = {p["at"]: p for p in points}
    # 09:00: a full minute; 09:01: 30 s so far, averaged over those 30 s.
    assert {k: by_time[at(0)][k] for k in insight.FIGURES} == {
        "own": 1.0,
        "borrowed": 2.0,
        "lent": 1.0,
        "idle": 1.0,
    }
    assert by_time[at(60)]["borrowed"] == 2.0
    assert whole["types"][0]["hours"] == {
        "own": 0.025,
        "borrowed": 0.05,
        "lent": 0.025,
        "idle": 0.025,
    }
    only_b = insight.usage_history(
        queue_id=live.queue.pk, window_key="hour", share_ids=[live.b.pk], now=at(90)
    )
    assert only_b["types"][0]["hours"]["own"] == 0.0
    assert only_b["types"][0]["hours"]["borrowed"] == 0.05
    # The 30-day window reads the six-hour rollups.
    month = insight.usage_history(queue_id=live.queue.pk, window_key="30d", now=at(90))
    assert len(month["types"][0]["points"]) == 120
    assert month["types"][0]["hours"]["borrowed"] == 0.05
    # Anything else is the default window (a bounded input).
    assert (
        insight.usage_history(queue_id=None, window_key="<script>", now=at(90))["window"] == "day"
    )


def test_chart_has_its_scale_and_a_time_axis_of_round_times(live: Any) -> None:
    run_cycle(live.queue.pk, now=at(0))
    run_cycle(live.queue.pk, now=at(90))
    history = insight.usage_history(queue_id=live.queue.pk, window_key="hour", now=at(90))
    html = str(
        usage_chart(
            history["types"][0], begin=history["begin"], end=history["end"], title="Queue <q>"
        )
    )
    assert html.startswith('<div class="history-chart"') and html.endswith("</div>")
    assert 'aria-label="Queue &lt;q&gt;"' in html and "<title>Queue &lt;q&gt;</title>" in html
    # Stacked to own 1 + borrowed 2 + lent 1 = 4 (idle is all lent): the scale is 5.
    assert '<span style="top: 0%">5</span><span style="top: 50%">2.5</span>' in html
    assert html.count('class="area ') == 3
    # The borrowed layer (1 to 3 instances over a scale of 5) of the hour's last step.
    assert '<path class="area borrowed" d="M0,' in html
    # The time axis: every 10 minutes over the hour, on round UTC times, not only the
    # window's start and "now".
    ticks = re.findall(r'style="left: ([\d.]+)%">(\d\d:\d\d)</span>', html)
    assert len(ticks) >= 5
    assert all(label.endswith("0") for _, label in ticks)
    assert [float(at) for at, _ in ticks] == sorted(float(at) for at, _ in ticks)


def test_time_ticks_over_a_day_and_a_month() -> None:
    begin = datetime(2026, 12, 2, 7, 45, tzinfo=UTC)
    day = time_ticks(begin, begin + timedelta(days=1))
    assert [label for _, label in day][:3] == ["08:00", "12:00", "16:00"]
    assert "Dec 03" in [label for _, label in day]  # midnight says the date
    month = time_ticks(begin, begin + timedelta(days=30))
    assert 3 <= len(month) <= 7 and all(label.startswith(("Dec", "Jan")) for _, label in month)


def test_pages_show_the_history(live: Any, client: Any) -> None:
    # The pages show the window up to now: record it ten minutes ago.
    base = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=10)
    run_cycle(live.queue.pk, now=base)
    run_cycle(live.queue.pk, now=base + timedelta(seconds=90))
    client.force_login(make_admin())
    for url in ("/", f"/queues/{live.queue.pk}/", f"/shares/{live.a.pk}/"):
        page = client.get(url + "?history=30d").content.decode()
        assert "Usage history" in page, url
        assert "last 30 days" in page, url
    page = client.get(f"/shares/{live.a.pk}/?history=hour").content.decode()
    assert '<div class="history-chart"' in page
    # The share page's figures are the share's own: a lent 0.025 instance-hours, no
    # borrowing (b's 0.05 are not in it).
    figures = page[page.index('class="history-figures') :]
    assert 'lent out</td><td class="num">0.00</td><td class="num">0 h</td>' not in figures
    assert '<td class="num">2 min</td>' in figures  # lent: 0.025 instance-hours
    assert 'borrowed</td><td class="num">0.00</td><td class="num">0 h</td>' in figures


def test_rebuild_from_recorded_events_matches_what_the_cycles_wrote(live: Any) -> None:
    """Cycles at 09:00 (a1 and b1 start), 09:01:30 and 09:05: the rollups rebuilt from
    the recorded admissions equal those the cycles wrote, and replace them."""
    run_cycle(live.queue.pk, now=at(0))
    run_cycle(live.queue.pk, now=at(90))
    run_cycle(live.queue.pk, now=at(300))
    written = {width: rollups(width) for width in (60, 900, 21600)}
    assert written[60][("a", at(240))] == (60.0, 0.0, 60.0, 60.0)
    UsageRollup.objects.all().delete()
    rows = usage_rebuild(queue_id=live.queue.pk, since=at(0), until=at(3600))
    assert rows == sum(len(v) for v in written.values())
    assert {width: rollups(width) for width in (60, 900, 21600)} == written
    # Again: replaced, not added.
    usage_rebuild(queue_id=live.queue.pk, since=at(0), until=at(3600))
    assert {width: rollups(width) for width in (60, 900, 21600)} == written


def test_rebuild_command(live: Any) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("usage_rebuild", "--queue", str(live.queue.pk), stdout=out)
    assert "history-q: 0 rollup rows written" in out.getvalue()  # nothing recorded yet
    now = timezone.now().replace(second=0, microsecond=0)
    run_cycle(live.queue.pk, now=now - timedelta(minutes=10))
    run_cycle(live.queue.pk, now=now - timedelta(minutes=5))
    out = StringIO()
    call_command("usage_rebuild", stdout=out)
    # 5 minutes: 5 minute rows and 1 or 2 quarter and six-hour rows, per share.
    rows = UsageRollup.objects.filter(queue=live.queue)
    assert rows.filter(width=60).count() == 10
    assert "history-q: " in out.getvalue()
    with pytest.raises(CommandError):
        call_command("usage_rebuild", "--days", "0")
    with pytest.raises(CommandError):
        call_command("usage_rebuild", "--queue", "999999")


def test_a_share_deleted_between_cycles_does_not_fail_the_next(live: Any) -> None:
    from governance.models import Share

    idle_share = make_share(live.queue, TeamFactory(name="team-c"), "c", {G5: 1}, policy="LEND")
    run_cycle(live.queue.pk, now=at(0))
    Share.objects.filter(pk=idle_share.pk).delete()  # no jobs: nothing protects it
    run_cycle(live.queue.pk, now=at(90))  # would insert rows for a deleted share
    assert rollups(UsageRollup.MINUTE)[("a", at(0))] == (60.0, 0.0, 60.0, 60.0)
    assert not UsageRollup.objects.filter(share_id=idle_share.pk).exists()


def test_a_failed_history_write_does_not_stop_the_cycle(live: Any, monkeypatch: Any) -> None:
    from django.db import DatabaseError

    from governance.models import Job, JobState
    from governance.services import insight as insight_services

    def broken(**kwargs: Any) -> None:
        raise DatabaseError("rollups unavailable")

    monkeypatch.setattr(insight_services, "usage_record", broken)
    result = run_cycle(live.queue.pk, now=at(0))
    assert result.admitted == 2
    assert Job.objects.filter(queue=live.queue, state=JobState.RUNNING).count() == 2
