"""Forecasts on a live queue: position, estimated start, its record and the forecast
error, with every figure worked out by hand.

One queue of 1 x ml.g5.xlarge, one RESERVE share with limit 1, the simulated fleet at
the clock's pace (``DEMO_TIME_FACTOR=1``). r1 (100 s of work) starts at C0. Then p1
(priority 5, 50 s) and p2 (priority 1, 10 s) wait. By hand: r1 ends at C0+100, p1 runs
C0+100..C0+150, p2 starts at C0+150. Positions: p1 first, p2 second.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import JobForecast, JobState
from governance.selectors import insight, scheduling
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, make_admin, make_job, make_lead, make_queue, make_share

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


def _whole_ten_seconds(moment: Any) -> Any:
    return moment.replace(second=moment.second // 10 * 10, microsecond=0)


@pytest.fixture
def live() -> Any:
    from types import SimpleNamespace

    queue = make_queue("forecast-q", {G5: 1})
    team = TeamFactory(name="red")
    share = make_share(queue, team, "red-share", {G5: 1}, policy="RESERVE")
    lead = make_lead(team, "red_lead")
    # A whole multiple of 10 s: the live forecast rounds finishes 100 to 200 s ahead to
    # even seconds (scheduler.engine.forecast.coarsen), so C0 + 150 s stays exact.
    c0 = _whole_ten_seconds(timezone.now() - timedelta(seconds=10))
    r1 = make_job(share, lead, name="r1", priority=9, duration=100, submitted_at=c0)
    run_cycle(queue.pk, now=c0)
    p1 = make_job(share, lead, name="p1", priority=5, duration=50, submitted_at=c0)
    p2 = make_job(share, lead, name="p2", priority=1, duration=10, submitted_at=c0)
    return SimpleNamespace(queue=queue, share=share, lead=lead, c0=c0, r1=r1, p1=p1, p2=p2)


def test_estimates_worked_out_by_hand(live: Any) -> None:
    found, basis = scheduling.forecast_jobs(live.queue.pk, [live.p1.pk, live.p2.pk])
    assert found[live.p1.pk]["position"] == 1
    assert found[live.p2.pk]["position"] == 2
    assert found[live.p1.pk]["estimated_start"] == live.c0 + timedelta(seconds=100)
    assert found[live.p2.pk]["estimated_start"] == live.c0 + timedelta(seconds=150)
    assert basis.startswith("engine playback, remaining work known for 1 of 1 running jobs")
    assert "to within about 1% of the time ahead" in basis


def test_explain_api_gives_position_start_and_basis(live: Any) -> None:
    client = APIClient()
    client.force_authenticate(live.lead)
    body = client.get(f"/api/jobs/{live.p2.pk}/explain/").json()
    assert body["position"] == 2
    start = (live.c0 + timedelta(seconds=150)).isoformat().replace("+00:00", "Z")
    assert body["estimated_start"] == start
    assert "remaining work known for 1 of 1 running jobs" in body["estimate_basis"]
    assert [r["reason"] for r in body["reasons"]] == ["own_quota_full"]
    # A running job has no forecast.
    running = client.get(f"/api/jobs/{live.r1.pk}/explain/").json()
    assert running == {
        "reasons": [],
        "position": None,
        "estimated_start": None,
        "estimate_basis": None,
        "entitled": None,
        "exposure": None,  # within its share's limit: nothing to reclaim
        "borrowed_progress": running["borrowed_progress"],
    }
    assert running["borrowed_progress"]["borrowed_seconds"] == 0


def test_first_estimate_is_recorded_once_and_gives_the_forecast_error(live: Any) -> None:
    scheduling.forecast_jobs(live.queue.pk, [live.p1.pk])
    first = {f.job_id: f for f in JobForecast.objects.all()}
    assert set(first) == {live.p1.pk, live.p2.pk}
    assert first[live.p2.pk].estimated_start == live.c0 + timedelta(seconds=150)
    assert first[live.p2.pk].position == 2

    # p1 starts exactly when estimated; p2 30 s late (the cycle runs at C0+180).
    run_cycle(live.queue.pk, now=live.c0 + timedelta(seconds=100))
    run_cycle(live.queue.pk, now=live.c0 + timedelta(seconds=180))
    live.p2.refresh_from_db()
    assert live.p2.state == JobState.RUNNING
    # A later reading records nothing new: the first estimates stay.
    scheduling.forecast_jobs(live.queue.pk, [live.p2.pk])
    assert JobForecast.objects.count() == 2
    assert (
        JobForecast.objects.get(pk=live.p2.pk).estimated_start == first[live.p2.pk].estimated_start
    )

    error = insight.forecast_error(queue_id=live.queue.pk)
    # Errors [0, 30]: nearest-rank p50 is the smaller, p90 the larger.
    assert error == {"jobs": 2, "p50": 0.0, "p90": 30.0, "late_p50": 0.0}
    # A window that only holds p2's start.
    later = insight.forecast_error(queue_id=live.queue.pk, since=live.c0 + timedelta(seconds=150))
    assert later == {"jobs": 1, "p50": 30.0, "p90": 30.0, "late_p50": 30.0}


def test_job_page_shows_the_estimate(live: Any, client: Any) -> None:
    admin = make_admin()
    client.force_login(admin)
    page = client.get(f"/jobs/{live.p1.pk}/").content.decode()
    assert "When it may start" in page
    assert "Place in the queue&#x27;s order" in page or "Place in the queue's order" in page
    assert "remaining work known for 1 of 1 running jobs" in page


def test_queue_page_shows_estimates_and_the_forecast_error(live: Any, client: Any) -> None:
    client.force_login(make_admin())
    page = client.get(f"/queues/{live.queue.pk}/").content.decode()
    assert "Estimated start" in page
    assert "No job with a recorded estimate has started" in page
    run_cycle(live.queue.pk, now=live.c0 + timedelta(seconds=100))
    page = client.get(f"/queues/{live.queue.pk}/").content.decode()
    assert "Jobs with a first estimate</dt><dd>1</dd>" in page


def test_agent_queue_uses_the_reported_progress() -> None:
    """On an agent queue, r1 (100 s declared) started at C0 and reported 40 s of work at
    C0 + 10 s: its end is C0 + 10 + 60 = C0 + 70 s, when w1 starts."""
    queue = make_queue("agent-q", {G5: 1})
    queue.executor = "agent"
    queue.save()
    team = TeamFactory(name="blue")
    share = make_share(queue, team, "blue-share", {G5: 1}, policy="RESERVE")
    lead = make_lead(team, "blue_lead")
    c0 = _whole_ten_seconds(timezone.now() - timedelta(seconds=20))
    r1 = make_job(share, lead, name="r1", priority=9, duration=100, submitted_at=c0)
    run_cycle(queue.pk, now=c0)
    r1.refresh_from_db()
    assert r1.state == JobState.RUNNING
    r1.work_done = 40
    r1.progress_at = c0 + timedelta(seconds=10)
    r1.save(update_fields=["work_done", "progress_at"])
    w1 = make_job(share, lead, name="w1", priority=5, duration=10, submitted_at=c0)
    found, basis = scheduling.forecast_jobs(queue.pk, [w1.pk])
    assert found[w1.pk]["estimated_start"] == c0 + timedelta(seconds=70)
    assert "remaining work known for 1 of 1 running jobs" in basis
