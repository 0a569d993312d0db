"""Capacity plan pages: the timeline everyone sees, admins' create / resize / end forms
(errors beside their fields, audit entries), plans on the share page and the overview
bars, and the job form offering the share's active and upcoming plans."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, CapacityPlan, Job
from governance.services import plans as plan_services
from tests.factories import make_world
from tests.web.test_overview import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_world()


def make_plan(world, **fields):
    now = timezone.now()
    values = {
        "actor": world.admin,
        "queue": world.queue,
        "share": world.red_share,
        "name": "red-december",
        "instance_type": "ml.p4d.24xlarge",
        "count": 2,
        "start": now - timedelta(hours=1),
        "end": now + timedelta(days=7),
    }
    values.update(fields)
    return plan_services.plan_create(**values)


def form_data(world, **overrides):
    now = timezone.now()
    data = {
        "share": world.red_share.pk,
        "name": "red-december",
        "instance_type": "ml.p4d.24xlarge",
        "count": 2,
        "start": (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        "end": (now + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M"),
        "hourly_price": "20",
        "reason": "bought for the release",
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize("role", ["red_member", "red_lead", "reviewer", "admin"])
def test_everyone_sees_the_timeline(world, role):
    make_plan(world)
    body = client_for(getattr(world, role)).get("/plans/").content.decode()
    assert "red-december" in body
    assert 'class="plan-timeline"' in body
    assert "0 of 2 \u00d7 ml.p4d.24xlarge in use" in body
    assert ("Resize" in body) == (role == "admin")
    assert ("New plan" in body) == (role == "admin")


def test_admin_creates_a_plan_through_the_form(world):
    client = client_for(world.admin)
    assert client.get("/plans/new/").status_code == 200
    response = client.post("/plans/new/", form_data(world))
    assert response.status_code == 302, response.content.decode()[:2000]
    plan = CapacityPlan.objects.get()
    assert (plan.name, plan.count, plan.share, plan.queue) == (
        "red-december",
        2,
        world.red_share,
        world.queue,
    )
    assert AuditEntry.objects.get(event_type=AuditEvent.PLAN_CREATED).reason == (
        "bought for the release"
    )


def test_create_errors_are_beside_their_fields(world):
    make_plan(world)
    now = timezone.now()
    response = client_for(world.admin).post(
        "/plans/new/",
        form_data(world, end=(now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")),
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "name" in errors  # taken in this queue
    assert "end" in errors


def test_only_admins_create_resize_end(world):
    plan = make_plan(world)
    lead = client_for(world.red_lead)
    assert lead.get("/plans/new/").status_code == 403
    assert lead.post("/plans/new/", form_data(world, name="x")).status_code == 403
    assert lead.post(f"/plans/{plan.pk}/resize/", {"count": 9, "reason": "r"}).status_code == 403
    assert lead.post(f"/plans/{plan.pk}/end/", {"reason": "r"}).status_code == 403
    plan.refresh_from_db()
    assert (plan.count, plan.ended_at) == (2, None)


def test_admin_resizes_and_ends(world):
    plan = make_plan(world)
    client = client_for(world.admin)
    response = client.post(f"/plans/{plan.pk}/resize/", {"count": 5, "reason": "more"})
    assert response.status_code == 302
    plan.refresh_from_db()
    assert plan.count == 5
    response = client.post(f"/plans/{plan.pk}/end/", {"reason": "finished"}, follow=True)
    plan.refresh_from_db()
    assert plan.ended_at is not None
    assert "Plan red-december ended" in response.content.decode()
    reasons = list(
        AuditEntry.objects.filter(subject_type="capacityplan")
        .order_by("id")
        .values_list("event_type", "reason")
    )
    assert reasons[1:] == [(AuditEvent.PLAN_RESIZED, "more"), (AuditEvent.PLAN_ENDED, "finished")]


def test_share_page_shows_its_plans_next_to_its_limits(world):
    make_plan(world)
    body = client_for(world.red_member).get(f"/shares/{world.red_share.pk}/").content.decode()
    assert 'id="share-plans"' in body
    assert "red-december" in body
    other = client_for(world.blue_lead).get(f"/shares/{world.blue_share.pk}/").content.decode()
    assert "red-december" not in other


def test_overview_bars_show_plans_in_their_own_colour(world):
    make_plan(world)
    body = client_for(world.red_member).get("/").content.decode()
    assert "Capacity plans" in body
    assert 'class="plan-idle"' in body  # an idle plan: its own colour, apart
    assert "sw plan-used" in body  # the legend


def test_job_form_offers_active_and_upcoming_plans(world):
    now = timezone.now()
    make_plan(world)
    make_plan(world, name="red-next", start=now + timedelta(days=8), end=now + timedelta(days=9))
    ended = make_plan(world, name="red-old")
    plan_services.plan_end(actor=world.admin, plan=ended, reason="x")
    make_plan(world, name="blue-plan", share=world.blue_share)
    client = client_for(world.red_lead)
    body = client.get("/jobs/new/").content.decode()
    assert 'value="plan:red-december"' in body
    assert 'value="plan:red-next"' in body
    assert 'value="plan:red-old"' not in body
    assert 'value="plan:blue-plan"' not in body  # not the lead's share
    data = {
        "share": world.red_share.pk,
        "name": "train",
        "kind": "training",
        "priority": 0,
        "pref_type_0": "plan:red-december",
        "pref_count_0": 2,
        "pref_type_1": "ml.p4d.24xlarge",
        "pref_count_1": 1,
    }
    response = client.post("/jobs/new/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    job = Job.objects.get()
    assert job.preferences == [
        {"plan": "red-december", "count": 2},
        {"instance_type": "ml.p4d.24xlarge", "count": 1},
    ]
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "2 on capacity plan <b>red-december</b>" in page

    response = client.post("/jobs/new/", {**data, "kind": "processing", "name": "etl"})
    assert response.status_code == 400
    assert "only training jobs may name a capacity plan" in response.content.decode()
    assert Job.objects.count() == 1


def test_queue_page_shows_its_plans_timeline(world):
    make_plan(world)
    body = client_for(world.red_member).get(f"/queues/{world.queue.pk}/").content.decode()
    assert "Capacity plans over time" in body
    assert 'class="plan-timeline"' in body
    assert "red-december" in body


def test_waiting_on_a_plan_says_why(world):
    """A job asking more than the plan has waits with plan_too_small, in words."""
    make_plan(world)
    from governance.services import jobs as job_services

    submitted = job_services.job_submit(
        actor=world.red_lead,
        share=world.red_share,
        name="too-big",
        preferences=[{"plan": "red-december", "count": 3}],
    )
    body = client_for(world.red_lead).get(f"/jobs/{submitted.pk}/").content.decode()
    assert "the capacity plan has fewer instances than asked" in body


def test_job_tables_show_the_plan_a_job_runs_on(world):
    from governance.services import jobs as job_services
    from scheduler.cycle.run import run_cycle

    make_plan(world)
    job = job_services.job_submit(
        actor=world.red_lead,
        share=world.red_share,
        name="on-plan",
        preferences=[{"plan": "red-december", "count": 2}],
    )
    run_cycle(world.queue.pk)
    job.refresh_from_db()
    assert job.plan is not None
    client = client_for(world.red_member)
    for url in (f"/queues/{world.queue.pk}/", f"/shares/{world.red_share.pk}/"):
        assert "plan red-december</span>" in client.get(url).content.decode(), url
    overview = client.get("/").content.decode()
    assert "(and 2 on capacity plans)" in overview
    assert 'class="plan-used"' in overview


def test_job_list_shows_the_plan(world):
    from governance.services import jobs as job_services
    from scheduler.cycle.run import run_cycle

    make_plan(world)
    job_services.job_submit(
        actor=world.red_lead,
        share=world.red_share,
        name="on-plan",
        preferences=[{"plan": "red-december", "count": 1}],
    )
    run_cycle(world.queue.pk)
    body = client_for(world.red_member).get("/jobs/").content.decode()
    assert "plan red-december</span>" in body
