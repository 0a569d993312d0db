"""Certified configurations end to end in headless Chromium against a live server and a
real Celery worker (issue 30): a lead proposes two configurations, a reviewer certifies
one and rejects the other, the lead builds the workload's template, submits a job by the
workload alone into a certified-only share, and the job runs on the certified fallback
because the first choice is busy; its page says which template entry ran and why."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Certification, Job, JobState, Team
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LIVE_WAIT_MS = 45_000
P4 = "ml.p4d.24xlarge"
G5 = "ml.g5.xlarge"
NEVER = 10 * 24 * 3600


@pytest.fixture
def certified_share(demo_world: Any) -> Any:
    """``e2e-certified``: one p4d and two g5 for vision's certified-only share; a
    never-ending job holds the p4d; workload vision/detector-finetune has its p4d
    configuration certified already (the template's first choice)."""
    from types import SimpleNamespace

    from django.contrib.auth import get_user_model

    from governance.services import capacity, certifications, jobs, shares, workloads

    users = get_user_model().objects
    admin, lead = users.get(username="admin"), users.get(username="lead-vision")
    queue = capacity.queue_create(
        actor=admin, name="e2e-certified", capacity={P4: 1, G5: 2}, description="Certified."
    )
    share = shares.share_create(
        actor=admin,
        queue=queue,
        team=Team.objects.get(name="vision"),
        name="e2e-certified-share",
        policy="RESERVE",
        limits={P4: 1, G5: 2},
        reason="Browser journey of certified configurations.",
    )
    hog = jobs.job_submit(
        actor=users.get(username="member-vision"),
        share=share,
        name="e2e-p4d-hog",
        preferences=[{"instance_type": P4, "count": 1}],
        priority=50,
        duration=NEVER,
    )
    wait_for(lambda: Job.objects.get(pk=hog.pk).state == JobState.RUNNING)
    share = shares.share_update(
        actor=admin,
        share=share,
        version=share.version,
        changes={"certified_only": True},
        reason="Only certified configurations from now on.",
    )
    workload = workloads.workload_create(
        actor=lead, team=share.team, name="vision/detector-finetune"
    )
    first = certifications.certification_propose(
        actor=lead,
        workload=workload,
        instance_type=P4,
        count=1,
        runtime=1800,
        converged=True,
        utilization=93,
        failure_rate=1,
        output_valid=True,
    )
    certifications.certification_decide(
        actor=users.get(username="reviewer"), certification=first, certify=True, note="ok"
    )
    return SimpleNamespace(share=share, workload=workload, first=first)


def propose(page: Any, instance_type: str, count: str, runtime: str) -> None:
    page.get_by_text("Propose a configuration").click()
    page.get_by_label("Instance type").select_option(instance_type)
    page.get_by_label("Count", exact=True).fill(count)
    page.get_by_label("Benchmark run time (seconds)").fill(runtime)
    page.get_by_label("Utilization (%)").fill("88")
    page.get_by_label("Failure rate (%)").fill("2")
    page.get_by_label("Converged").check()
    page.get_by_label("Output valid").check()
    page.get_by_label("Notes").fill("mAP within 0.5% of the reference run")
    page.get_by_role("button", name="Propose").click()
    expect(page.locator(f'tr[data-configuration="{instance_type} x{count}"]')).to_contain_text(
        "proposed"
    )


def test_a_job_by_workload_alone_runs_on_its_certified_fallback(
    certified_share: Any, sign_in: Any
) -> None:
    w = certified_share
    lead = sign_in("lead-vision")
    lead.goto(f"/workloads/{w.workload.pk}/")
    propose(lead, G5, "2", "3600")
    propose(lead, G5, "1", "7000")

    reviewer = sign_in("reviewer")
    reviewer.goto(f"/workloads/{w.workload.pk}/")
    two = reviewer.locator(f'tr[data-actions="{G5} x2"]')
    two.locator('input[name="note"]').fill("benchmark with the production image")
    two.get_by_role("button", name="Certify").click()
    expect(reviewer.locator(f'tr[data-configuration="{G5} x2"]')).to_contain_text("certified")
    one = reviewer.locator(f'tr[data-actions="{G5} x1"]')
    one.locator('input[name="note"]').fill("no evaluation run")
    one.get_by_role("button", name="Reject").click()
    expect(reviewer.locator(f'tr[data-configuration="{G5} x1"]')).to_contain_text("rejected")

    second = Certification.objects.get(workload=w.workload, instance_type__name=G5, count=2)
    lead.goto(f"/workloads/{w.workload.pk}/template/")
    lead.get_by_label("Choice 1", exact=True).select_option(str(w.first.pk))
    lead.get_by_label("Why choice 1").fill("fastest: 30 min")
    lead.get_by_label("Choice 2", exact=True).select_option(str(second.pk))
    lead.get_by_label("Why choice 2").fill("when the p4d is busy: same result in an hour")
    lead.get_by_role("button", name="Save template").click()
    expect(lead.locator("#template")).to_contain_text("when the p4d is busy")

    lead.goto(f"/jobs/new/?share={w.share.pk}")
    lead.get_by_label("Name").fill("e2e-by-workload")
    lead.get_by_label("Workload").select_option(str(w.workload.pk))
    lead.get_by_role("button", name="Submit job").click()
    expect(lead).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="e2e-by-workload")
    assert job.preferences == [
        {"instance_type": P4, "count": 1, "runtime": 1800},
        {"instance_type": G5, "count": 2, "runtime": 3600},
    ]

    def on_fallback() -> bool:
        """the job runs on its second preference, the certified 2 x g5"""
        job.refresh_from_db()
        return job.state == JobState.RUNNING and job.preference == 1

    wait_for(on_fallback, timeout=LIVE_WAIT_MS / 1000)
    lead.reload()
    expect(lead.locator("#job-template")).to_contain_text(
        "runs on template entry 2 (preference 2): when the p4d is busy"
    )
