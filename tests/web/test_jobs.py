"""Job pages: list with filters, the job page with its live status, submit, reprioritise,
cancel (each through its service, errors beside their fields)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.cache import caches

from governance.models import AuditEntry, AuditEvent, Job, JobState
from scheduler import readings
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, make_lead
from tests.web.test_overview import (
    aws_world,
    borrowing_then_reclaim,
    client_for,
    count_queries,
    submit,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return aws_world()


def submit_data(share: Any, **overrides: Any) -> dict[str, Any]:
    data = {
        "share": share.pk,
        "name": "resnet-sweep",
        "kind": "training",
        "priority": 10,
        "pref_type_0": "ml.g5.xlarge",
        "pref_count_0": 1,
        "count": "",
        "max_pending": "",
        "checkpoint_interval": 600,
        "duration": 1800,
    }
    data.update(overrides)
    return data


def listed_names(response: Any) -> list[str]:
    """The names of the jobs the list shows, in its order."""
    return re.findall(r'<td><a href="/jobs/\d+/">([^<]+)</a>', response.content.decode())


@pytest.mark.parametrize("role", ["admin", "reviewer", "lead_vision", "member_vision"])
def test_list_and_job_page_for_every_role(world, role):
    job = submit(world.lead_vision, world.background, "bg-high", 3)
    client = client_for(getattr(world, role))
    listing = client.get("/jobs/")
    assert listing.status_code == 200 and "bg-high" in listing.content.decode()
    page = client.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200
    body = page.content.decode()
    assert f'hx-get="/jobs/{job.pk}/partials/status/"' in body
    # The submitter's team lead and admins may change it; others only read.
    assert ("Change priority" in body) == (role in ("admin", "lead_vision"))


def test_filters_narrow_the_list(world):
    submit(world.lead_vision, world.background, "bg-high", 3)
    submit(world.lead_language, world.medium, "llm-pretrain", 3)
    client = client_for(world.reviewer)
    names = listed_names
    assert names(client.get("/jobs/?q=pretrain")) == ["llm-pretrain"]
    assert names(client.get(f"/jobs/?share={world.background.pk}")) == ["bg-high"]
    assert names(client.get(f"/jobs/?team={world.language.pk}")) == ["llm-pretrain"]
    assert names(client.get("/jobs/?state=RUNNING")) == []
    assert len(names(client.get("/jobs/?state=active&kind=training"))) == 2
    assert "No job matches these filters" in client.get("/jobs/?q=nothing").content.decode()


def test_job_page_shows_timeline_and_preemptor(world):
    borrowing_then_reclaim(world)
    victim = Job.objects.get(name="bg-med")
    body = client_for(world.member_vision).get(f"/jobs/{victim.pk}/").content.decode()
    for text in ("Submitted", "Admitted", "Preempted", "reclaim", "llm-pretrain"):
        assert text in body
    assert "Why it waits" in body  # requeued: pending again, with the engine's reasons
    (reason,) = readings.explain_queue(victim.queue_id)[0][victim.pk]
    assert reason["reason"] in body


def test_status_partial_is_the_region_only(world):
    job = submit(world.lead_vision, world.background, "bg-high", 3)
    response = client_for(world.reviewer).get(f"/jobs/{job.pk}/partials/status/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="job-status"' in body and "<html" not in body and "Timeline" in body


def test_member_submits_a_job(world):
    client = client_for(world.member_vision)
    assert client.get("/jobs/new/").status_code == 200
    response = client.post("/jobs/new/", submit_data(world.background))
    assert response.status_code == 302
    job = Job.objects.get(name="resnet-sweep")
    assert job.submitter == world.member_vision and job.state == JobState.PENDING
    assert job.preferences == [{"instance_type": "ml.g5.xlarge", "count": 1}]
    assert AuditEntry.objects.filter(event_type=AuditEvent.JOB_SUBMITTED, job_id=job.pk).exists()


def test_submit_errors_are_beside_their_fields(world):
    client = client_for(world.member_vision)
    response = client.post("/jobs/new/", submit_data(world.background, priority=300, count=2))
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "above the highest you may use" in errors["priority"][0]
    assert "not both" in errors["count"][0]
    assert not Job.objects.exists()


def test_submitting_to_another_teams_share_is_refused(world):
    client = client_for(world.member_vision)
    response = client.post("/jobs/new/", submit_data(world.medium))
    assert response.status_code == 400  # not among the member's shares: not a choice
    assert not Job.objects.exists()


def test_reviewer_without_team_may_not_submit(world):
    assert client_for(world.reviewer).get("/jobs/new/").status_code == 403


def test_lead_reprioritises_within_band(world):
    job = submit(world.member_vision, world.background, "bg-high", 3)
    client = client_for(world.lead_vision)
    response = client.post(f"/jobs/{job.pk}/priority/", {"priority": 200, "reason": "milestone"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.priority == 200
    entry = AuditEntry.objects.get(event_type=AuditEvent.JOB_REPRIORITISED, job_id=job.pk)
    assert entry.actor == world.lead_vision and entry.after == {"priority": 200}


def test_reprioritise_above_band_shows_the_field_error(world):
    job = submit(world.member_vision, world.background, "bg-high", 3)
    response = client_for(world.lead_vision).post(f"/jobs/{job.pk}/priority/", {"priority": 700})
    assert response.status_code == 400
    assert (
        "above the highest you may use" in response.context["priority_form"].errors["priority"][0]
    )
    job.refresh_from_db()
    assert job.priority == 3


def test_other_lead_may_not_reprioritise_or_cancel(world):
    job = submit(world.member_vision, world.background, "bg-high", 3)
    other = make_lead(TeamFactory(name="other"), "other-lead")
    client = client_for(other)
    assert client.post(f"/jobs/{job.pk}/priority/", {"priority": 5}).status_code == 403
    assert client.post(f"/jobs/{job.pk}/cancel/", {}).status_code == 403
    job.refresh_from_db()
    assert (job.priority, job.state) == (3, JobState.PENDING)


def test_submitter_cancels(world):
    job = submit(world.member_vision, world.background, "bg-high", 3)
    response = client_for(world.member_vision).post(f"/jobs/{job.pk}/cancel/", {"reason": "oops"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert AuditEntry.objects.filter(event_type=AuditEvent.JOB_CANCELLED, job_id=job.pk).exists()
    assert client_for(world.member_vision).get("/jobs/x/").status_code == 404


def test_job_pages_run_constant_queries(world):
    borrowing_then_reclaim(world)
    victim = Job.objects.get(name="bg-med")
    client = client_for(world.lead_vision)
    urls = ["/jobs/", f"/jobs/{victim.pk}/", f"/jobs/{victim.pk}/partials/status/", "/jobs/new/"]
    small = [count_queries(client, url) for url in urls]
    for i in range(60):
        submit(world.lead_vision, world.background, f"more-{i}", 1)
    run_cycle(world.queue.pk)
    submit(world.lead_language, world.medium, "llm-2", 5)
    run_cycle(world.queue.pk)
    big = [count_queries(client, url) for url in urls]
    assert small == big
    response = client.get("/jobs/")
    assert len(listed_names(response)) == 50
    assert "page=2" in response.content.decode()


def test_job_list_count_is_capped(world, monkeypatch):
    """The list counts at most COUNT_CAP + 1 jobs (no COUNT(*) over the whole table)."""
    from governance.web import jobs as job_pages

    for i in range(4):
        submit(world.lead_vision, world.background, f"cap-{i}", 1)
    monkeypatch.setattr(job_pages, "COUNT_CAP", 2)
    body = client_for(world.admin).get("/jobs/").content.decode()
    assert "of more than 2" in body
    monkeypatch.setattr(job_pages, "COUNT_CAP", 1000)
    caches["shared"].clear()  # the cap is code: a deploy that changes it starts afresh
    body = client_for(world.admin).get("/jobs/").content.decode()
    assert "of more than" not in body


def test_job_page_joins_its_decisions_into_the_job_read(world):
    """The job page's decision and "resubmitted from" lines come with the job (one
    query, joined), not one query each."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    borrowing_then_reclaim(world)
    victim = Job.objects.get(name="bg-med")
    client = client_for(world.lead_vision)
    client.get(f"/jobs/{victim.pk}/")  # fills the caches
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(f"/jobs/{victim.pk}/").status_code == 200
    own = [
        q["sql"]
        for q in ctx.captured_queries
        if q["sql"].startswith('SELECT "governance_decision"')
    ]
    assert own == []
