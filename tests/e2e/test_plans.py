"""A capacity plan end to end in headless Chromium against a live server and a real
Celery worker (issue 14): an admin creates a plan on the Plans page; a team lead's
training job names it first and starts on it; the admin ends the plan and the job falls
back to its on-demand preference, which the job page shows without a reload."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import CapacityPlan, Job, JobEvent, JobState, Team
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LIVE_WAIT_MS = 10_000  # the job page polls every 2 s; the worker decides within a second


@pytest.fixture
def plan_queue(demo_world: Any) -> Any:
    """``e2e-plans``: one on-demand ml.g5.xlarge, owned by vision's ``e2e-plan-share``."""
    from django.contrib.auth import get_user_model

    from governance.services import capacity, shares

    admin = get_user_model().objects.get(username="admin")
    queue = capacity.queue_create(
        actor=admin, name="e2e-plans", capacity={"ml.g5.xlarge": 1}, description="Plans."
    )
    return shares.share_create(
        actor=admin,
        queue=queue,
        team=Team.objects.get(name="vision"),
        name="e2e-plan-share",
        policy="RESERVE",
        limits={"ml.g5.xlarge": 1},
        reason="Browser journey of capacity plans.",
    )


def test_admin_creates_a_plan_a_leads_training_job_starts_on_it_then_falls_back(
    plan_queue: Any, sign_in: Any
) -> None:
    share = plan_queue
    now = datetime.now(UTC)

    # An admin creates the plan on the Plans page.
    admin = sign_in("admin")
    admin.get_by_role("link", name="Plans", exact=True).click()
    admin.get_by_role("link", name="New plan").click()
    admin.locator("#id_share").select_option(str(share.pk))
    admin.get_by_label("Name").fill("e2e-plan")
    admin.locator("#id_instance_type").select_option("ml.g5.xlarge")
    admin.get_by_label("Count").fill("1")
    admin.get_by_label("Start (UTC)").fill((now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M"))
    admin.get_by_label("End (UTC)").fill((now + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))
    admin.get_by_label("Reason (for the audit trail)").fill("E2E: reserved for the sweep.")
    admin.get_by_role("button", name="Create plan").click()
    expect(admin.locator(".messages")).to_contain_text("Capacity plan e2e-plan created.")
    plan = CapacityPlan.objects.get(name="e2e-plan")
    row = admin.locator(f"#plan-{plan.pk}")
    expect(row).to_contain_text("active")

    # A lead of vision submits a training job naming the plan first, on-demand second.
    lead = sign_in("lead-vision")
    lead.goto(f"/jobs/new/?share={share.pk}")
    lead.get_by_label("Name").fill("e2e-train")
    lead.locator("#id_kind").select_option("training")
    lead.get_by_label("Preference 1").select_option("plan:e2e-plan")
    lead.get_by_label("Count 1").fill("1")
    lead.get_by_label("Preference 2").select_option("ml.g5.xlarge")
    lead.get_by_label("Count 2").fill("1")
    lead.get_by_label("Duration (seconds of work at speed 1.0)").fill(str(10 * 24 * 3600))
    lead.get_by_role("button", name="Submit job").click()
    expect(lead).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="e2e-train")

    # The worker starts it on the plan; the live status shows it.
    status = lead.locator("#job-status")
    expect(status).to_contain_text("on capacity plan e2e-plan", timeout=LIVE_WAIT_MS)
    job.refresh_from_db()
    assert (job.state, job.plan_id, job.preference) == (JobState.RUNNING, plan.pk, 0)

    # The admin ends the plan; the job is stopped (plan_ended, not counted) and starts
    # again on its on-demand preference.
    admin.goto("/plans/")
    admin.on("dialog", lambda dialog: dialog.accept())
    end_form = admin.locator(f"#plan-{plan.pk} form[action$='/end/']")
    end_form.get_by_placeholder("reason").fill("E2E: the sweep moved to next month.")
    end_form.get_by_role("button", name="End now").click()
    expect(admin.locator(".messages")).to_contain_text("Plan e2e-plan ended.")

    expect(status).to_contain_text("(preference 2)", timeout=LIVE_WAIT_MS)
    expect(status).to_contain_text("within its share's limit")
    expect(status).not_to_contain_text("on capacity plan")

    def fell_back() -> bool:
        """the job runs on-demand on its second preference after a plan_ended stop"""
        job.refresh_from_db()
        return job.state == JobState.RUNNING and job.plan_id is None and job.preference == 1

    wait_for(fell_back)
    assert job.preemptions == 1 and job.counted_preemptions == 0
    stop = JobEvent.objects.get(job=job, type="preempted")
    assert stop.data["reason"] == "plan_ended"
