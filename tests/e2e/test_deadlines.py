"""A deadline end to end in headless Chromium against a live server and a real Celery
worker (issue 28): a team lead submits a job with a deadline and two preferences on the
form; as time passes the busy first choice can no longer finish in time, which its page
says, and once the second choice frees the job starts there; a job whose every choice is
too late times out at that moment, and its page shows why."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Job, JobEvent, JobState, Team
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LIVE_WAIT_MS = 45_000  # the page polls every 2 s; the worker acts at the deadline's instant
P4 = "ml.p4d.24xlarge"
G5 = "ml.g5.xlarge"
NEVER = 10 * 24 * 3600  # runs that never finish during the test


@pytest.fixture
def busy_queue(demo_world: Any) -> Any:
    """``e2e-deadlines``: one p4d and two g5, owned by vision's ``e2e-deadline-share``;
    a never-ending job holds each."""
    from types import SimpleNamespace

    from django.contrib.auth import get_user_model

    from governance.services import capacity, jobs, shares

    users = get_user_model().objects
    admin = users.get(username="admin")
    queue = capacity.queue_create(
        actor=admin, name="e2e-deadlines", capacity={P4: 1, G5: 2}, description="Deadlines."
    )
    share = shares.share_create(
        actor=admin,
        queue=queue,
        team=Team.objects.get(name="vision"),
        name="e2e-deadline-share",
        policy="RESERVE",
        limits={P4: 1, G5: 2},
        reason="Browser journey of deadlines.",
    )
    member = users.get(username="member-vision")
    hogs = {
        name: jobs.job_submit(
            actor=member,
            share=share,
            name=f"e2e-{name}-hog",
            preferences=[{"instance_type": name, "count": count}],
            priority=50,
            duration=NEVER,
        )
        for name, count in ((P4, 1), (G5, 2))
    }
    wait_for(lambda: all(Job.objects.get(pk=j.pk).state == JobState.RUNNING for j in hogs.values()))
    return SimpleNamespace(queue=queue, share=share, hogs=hogs, admin=admin)


def test_a_busy_first_choice_runs_out_of_time_and_the_job_starts_on_its_second(
    busy_queue: Any, sign_in: Any
) -> None:
    from governance.services import jobs

    w = busy_queue
    # The first choice (one p4d) needs an hour, the second (two g5) half an hour; the
    # deadline is an hour and 20 s away: the p4d can meet it only if it starts within
    # about 20 s, the g5 for another half hour.
    deadline = (datetime.now(UTC) + timedelta(seconds=3620)).replace(microsecond=0)
    lead = sign_in("lead-vision")
    lead.goto(f"/jobs/new/?share={w.share.pk}")
    lead.get_by_label("Name").fill("e2e-report")
    lead.get_by_label("Preference 1").select_option(P4)
    lead.get_by_label("Count 1").fill("1")
    lead.get_by_label("Expected run time 1 (seconds)").fill("3600")
    lead.get_by_label("Preference 2").select_option(G5)
    lead.get_by_label("Count 2").fill("2")
    lead.get_by_label("Expected run time 2 (seconds)").fill("1800")
    lead.get_by_label("Deadline date").fill(deadline.strftime("%Y-%m-%d"))
    lead.get_by_label("Deadline time").fill(deadline.strftime("%H:%M:%S"))
    lead.get_by_label("Time zone").fill("UTC")
    lead.get_by_label("Budget ($)").fill("500")
    lead.get_by_role("button", name="Submit job").click()
    expect(lead).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="e2e-report")
    assert job.deadline == deadline and len(job.preferences) == 2

    # Waiting, both choices busy: the page says until when each can still start.
    outlook = lead.locator("#outlook")
    expect(outlook).to_contain_text("yes, if it starts by")
    # Time passes: the first choice can no longer finish by the deadline.
    expect(outlook.locator("tr.outlook-deadline_unreachable")).to_contain_text(
        "too late", timeout=LIVE_WAIT_MS
    )
    expect(lead.locator("#job-status")).to_contain_text("could no longer finish by the deadline")
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING

    # The two g5 free up: it starts there, on its second choice.
    jobs.job_cancel(actor=w.admin, job=w.hogs[G5], reason="E2E: make room.")
    status = lead.locator("#job-status")
    expect(status).to_contain_text("(preference 2)", timeout=LIVE_WAIT_MS)

    def started_second() -> bool:
        """the job runs on its second preference"""
        job.refresh_from_db()
        return job.state == JobState.RUNNING and job.preference == 1

    wait_for(started_second)


def test_a_job_whose_every_choice_is_too_late_times_out_with_the_reason_on_its_page(
    busy_queue: Any, sign_in: Any
) -> None:
    from django.contrib.auth import get_user_model

    from governance.services import jobs

    w = busy_queue
    lead_user = get_user_model().objects.get(username="lead-vision")
    # Each choice needs a minute; the deadline is 70 s away: in about 10 s neither can
    # finish in time, and the worker times the job out at that instant.
    job = jobs.job_submit(
        actor=lead_user,
        share=w.share,
        name="e2e-too-late",
        preferences=[
            {"instance_type": P4, "count": 1, "runtime": 60},
            {"instance_type": G5, "count": 2, "runtime": 60},
        ],
        deadline=datetime.now(UTC) + timedelta(seconds=70),
    )
    lead = sign_in("lead-vision")
    lead.goto(f"/jobs/{job.pk}/")
    status = lead.locator("#job-status")
    expect(status).to_contain_text("Timed out", timeout=LIVE_WAIT_MS)
    expect(status).to_contain_text("no preference can finish by its deadline")

    job.refresh_from_db()
    assert job.state == JobState.TIMED_OUT
    assert JobEvent.objects.get(job=job, type="timed_out").data["reason"] == "deadline"
