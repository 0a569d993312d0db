"""Entitled and borrowed on a live queue (docs/insight.md): a pending job's start on its
share's entitlement alone, a borrowed run's exposure and the part of a job's running
that borrowed, through the selectors, the explain API and the job page.

One queue of 4 x ml.g5.xlarge at the clock's pace. Share blue (team blue) is
LEND_AND_BORROW with limit 1; share red (team red) is LEND with limit 3, so no capacity
is unowned. At C0 blue's r (1 instance, 100 s) starts within blue's limit and b (2, 1000
s) borrows 2 of red's idle entitlement. Then blue's p (1, 10 s) and big (2) wait. As
things are, p borrows red's last idle instance at once. On blue's entitlement alone blue
holds 3 > 1 until b ends at C0+1000, so p starts then; big asks 2 > blue's limit 1:
never on its own entitlement.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import JobEvent, JobState
from governance.selectors import borrowed, scheduling
from governance.services.jobs import job_submit
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, make_job, make_lead, make_queue, make_share

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


@pytest.fixture
def live() -> SimpleNamespace:
    queue = make_queue("lend-q", {G5: 4})
    blue_team, red_team = TeamFactory(name="blue"), TeamFactory(name="red")
    blue = make_share(queue, blue_team, "blue", {G5: 1}, policy="LEND_AND_BORROW", borrow_limit=-1)
    red = make_share(queue, red_team, "red", {G5: 3}, policy="LEND")
    lead, red_lead = make_lead(blue_team, "blue_lead"), make_lead(red_team, "red_lead")
    c0 = timezone.now().replace(microsecond=0) - timedelta(seconds=10)
    r = make_job(blue, lead, name="r", priority=9, duration=100, submitted_at=c0)
    b = make_job(
        blue,
        lead,
        name="b",
        priority=8,
        duration=1000,
        submitted_at=c0,
        preferences=[{"instance_type": G5, "count": 2}],
    )
    run_cycle(queue.pk, now=c0)
    p = make_job(blue, lead, name="p", priority=5, duration=10, submitted_at=c0)
    big = make_job(
        blue,
        lead,
        name="big",
        priority=1,
        submitted_at=c0,
        preferences=[{"instance_type": G5, "count": 2}],
    )
    return SimpleNamespace(
        queue=queue,
        blue=blue,
        red=red,
        lead=lead,
        red_lead=red_lead,
        c0=c0,
        r=r,
        b=b,
        p=p,
        big=big,
    )


def test_the_run_that_borrowed_records_its_lender(live: SimpleNamespace) -> None:
    admitted = JobEvent.objects.get(job=live.b, type="admitted")
    assert admitted.data["borrowed"] == 2
    assert admitted.data["lent_by"] == [{"share": "red", "team": "red", "instances": 2}]
    assert "lent_by" not in JobEvent.objects.get(job=live.r, type="admitted").data


def test_start_as_today_and_on_the_entitlement_alone(live: SimpleNamespace) -> None:
    today, _ = scheduling.forecast_jobs(live.queue.pk, [live.p.pk])
    assert today[live.p.pk]["estimated_start"] <= timezone.now()  # borrows at once
    found, basis = scheduling.entitled_forecast_jobs(live.queue.pk, [live.p.pk, live.big.pk])
    start = found[live.p.pk]["estimated_start"]
    # b's end at C0+1000, rounded up to within 1% of the time ahead
    assert live.c0 + timedelta(seconds=1000) <= start <= live.c0 + timedelta(seconds=1020)
    assert not found[live.p.pk]["never"]
    assert found[live.big.pk] == {"estimated_start": None, "times_out": False, "never": True}
    assert "nobody lends" in basis


def test_explain_gives_both_starts_and_the_page_says_so(live: SimpleNamespace, client: Any) -> None:
    api = APIClient()
    api.force_authenticate(live.lead)
    body = api.get(f"/api/jobs/{live.big.pk}/explain/").json()
    assert body["entitled"]["never"] is True
    assert body["entitled"]["words"].startswith("never on its own entitlement")
    assert body["exposure"] is None
    assert body["borrowed_progress"]["runs"] == 0
    body = api.get(f"/api/jobs/{live.p.pk}/explain/").json()
    assert body["entitled"]["estimated_start"] is not None
    assert "nobody lends" in body["entitled"]["basis"]
    client.force_login(live.lead)
    page = client.get(f"/jobs/{live.big.pk}/").content.decode()
    assert "entitlement alone" in page
    assert "never on its own entitlement" in page


def test_exposure_of_the_borrowed_run(live: SimpleNamespace, client: Any) -> None:
    api = APIClient()
    api.force_authenticate(live.lead)
    exposure = api.get(f"/api/jobs/{live.b.pk}/explain/").json()["exposure"]
    assert exposure["status"] == "may_be_reclaimed"
    assert exposure["share_borrowed"] == 2
    assert exposure["lenders"] == [
        {
            "source": "lender",
            "share": live.red.pk,
            "share_name": "red",
            "team_name": "red",
            "instances": 2,
            "waiting_jobs": 0,
            "waiting_instances": 0,
        }
    ]
    # r runs within blue's limit, but blue borrows on the type: r is open to reclaim too
    assert scheduling.exposure_jobs(live.queue.pk, [live.r.pk])[live.r.pk]["share_borrowed"] == 2
    # red's own work arrives, more than the one free instance: reclaim is imminent
    q = job_submit(  # as users submit: its event moves the queue's state version
        actor=live.red_lead,
        share=live.red,
        name="q",
        duration=10,
        preferences=[{"instance_type": G5, "count": 2}],
    )
    exposure = api.get(f"/api/jobs/{live.b.pk}/explain/").json()["exposure"]
    assert exposure["status"] == "reclaim_imminent"
    assert exposure["wanted_back_by"] == ["red"]
    assert exposure["reclaimed_now_by"] == q.pk
    assert exposure["lenders"][0]["waiting_jobs"] == 1
    assert exposure["lenders"][0]["waiting_instances"] == 2
    client.force_login(live.lead)
    page = client.get(f"/jobs/{live.b.pk}/").content.decode()
    assert "reclaim imminent" in page.lower()
    assert "lent by red (share red)" in page


def test_the_part_of_its_running_that_borrowed(live: SimpleNamespace, client: Any) -> None:
    """b ran 600 s on red's capacity and was reclaimed; it ran again 100 s on blue's own."""
    run_cycle(live.queue.pk, now=live.c0 + timedelta(seconds=1))  # p borrows
    t = live.c0 + timedelta(seconds=600)
    make_job(
        live.red,
        live.red_lead,
        name="q",
        duration=5000,
        submitted_at=t,
        preferences=[{"instance_type": G5, "count": 3}],
    )
    run_cycle(live.queue.pk, now=t)
    live.b.refresh_from_db()
    assert live.b.state == JobState.PENDING
    events = list(JobEvent.objects.filter(job=live.b).order_by("at", "id"))
    progress = borrowed.borrowed_progress(events, live.b.state, t)
    assert (progress.run_seconds, progress.borrowed_seconds) == (600, 600)
    assert progress.summary() == (
        "10 min of its 10 min of running was on borrowed capacity, lent by red (share red)."
    )
    client.force_login(live.lead)
    page = client.get(f"/jobs/{live.b.pk}/").content.decode()
    assert "On borrowed capacity" in page and "lent by red (share red)" in page


def test_progress_sums_borrowed_runs_only() -> None:
    """Runs of 1.8 h on own, 3.2 h borrowed from team-b: 3.2 h of 5.0 h."""
    t0 = timezone.now()

    def at(hours: float) -> Any:
        return t0 + timedelta(hours=hours)

    lent = [{"share": "b", "team": "team-b", "instances": 2}]
    events = [
        JobEvent(type="submitted", at=at(0)),
        JobEvent(type="admitted", at=at(0), data={"borrowed": 0}),
        JobEvent(type="preempted", at=at(1.8), data={"reason": "priority"}),
        JobEvent(type="admitted", at=at(2), data={"borrowed": 2, "lent_by": lent}),
        JobEvent(type="completed", at=at(5.2)),
    ]
    progress = borrowed.borrowed_progress(events, JobState.SUCCEEDED, at(6))
    assert progress.summary() == (
        "3.2 h of its 5.0 h of running was on borrowed capacity, lent by team-b (share b)."
    )


def test_team_view_shows_both_starts_and_exposed_runs(live: SimpleNamespace, client: Any) -> None:
    client.force_login(live.lead)
    page = client.get(f"/teams/{live.blue.team_id}/").content.decode()
    pending = page[page.index("team-pending") : page.index("team-borrowed")]
    assert "On its entitlement alone" in pending
    assert "never on its own entitlement" in pending  # big
    assert pending.count('class="nowrap entitled-start"') == 2  # p and big
    exposed = page[page.index("team-borrowed") :]
    assert f'href="/jobs/{live.b.pk}/"' in exposed and f'href="/jobs/{live.r.pk}/"' in exposed
    assert "may be reclaimed" in exposed and "lent by red (share red" in exposed
