"""Verified recovery and a decision end to end in headless Chromium against a live server
and a real Celery worker (issue 29, docs/workloads.md): a lead's tolerant job borrows,
is reclaimed by the lender, resumes and completes; the lead confirms its output on the
job page and the workload shows verified with that job as evidence. Then, with no
retries left in the share, another job is reclaimed once, fails, and the lead resolves
its decision from the team view by resubmitting it within the share's own capacity."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Decision, Job, JobEvent, JobState, Team
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

G5 = "ml.g5.xlarge"
RUN_WAIT = 60.0  # the simulated fleet does 60 work-seconds a second


@pytest.fixture
def lending_queue(demo_world: Any) -> Any:
    """``e2e-recovery``: two g5; speech's share owns one and lends it, vision's owns the
    other and borrows without bound."""
    from types import SimpleNamespace

    from django.contrib.auth import get_user_model

    from governance.services import capacity, shares, workloads

    users = get_user_model().objects
    admin = users.get(username="admin")
    queue = capacity.queue_create(
        actor=admin, name="e2e-recovery", capacity={G5: 2}, description="Recovery."
    )
    lender = shares.share_create(
        actor=admin,
        queue=queue,
        team=Team.objects.get(name="speech"),
        name="e2e-lender",
        policy="LEND",
        limits={G5: 1},
        reason="Browser journey of recovery.",
    )
    borrower = shares.share_create(
        actor=admin,
        queue=queue,
        team=Team.objects.get(name="vision"),
        name="e2e-borrower",
        policy="LEND_AND_BORROW",
        borrow_limit=-1,
        limits={G5: 1},
        reason="Browser journey of recovery.",
    )
    lead = users.get(username="lead-vision")
    workload = workloads.workload_create(actor=lead, team=borrower.team, name="vision/e2e-train")
    return SimpleNamespace(
        queue=queue,
        lender=lender,
        borrower=borrower,
        admin=admin,
        lead=lead,
        speech=users.get(username="member-speech"),
        workload=workload,
    )


def _reclaim(w: Any, job: Job, name: str) -> Job:
    """The job runs on two g5, one borrowed; the lender's job takes its g5 back."""
    from governance.services import jobs

    def borrowing() -> bool:
        """the job runs, borrowing the lender's idle g5"""
        job.refresh_from_db()
        return job.state == JobState.RUNNING and job.borrowed == 1

    wait_for(borrowing, timeout=RUN_WAIT)
    jobs.job_submit(
        actor=w.speech,
        share=w.lender,
        name=name,
        preferences=[{"instance_type": G5, "count": 1}],
        duration=120,
    )

    def reclaimed() -> bool:
        """the lender's job reclaimed its g5"""
        return JobEvent.objects.filter(job=job, type="preempted", data__reason="reclaim").exists()

    wait_for(reclaimed, timeout=RUN_WAIT)
    return job


def test_a_resumed_run_verifies_its_workload_and_a_lead_resolves_a_decision(
    lending_queue: Any, sign_in: Any
) -> None:
    from governance.services import jobs, shares

    w = lending_queue
    two_g5 = [{"instance_type": G5, "count": 2}]
    tolerant = jobs.job_submit(
        actor=w.lead,
        share=w.borrower,
        name="e2e-tolerant",
        preferences=two_g5,
        duration=900,
        checkpoint_interval=60,
        workload=w.workload.pk,
    )
    _reclaim(w, tolerant, "e2e-lender-first")

    def completed() -> bool:
        """the reclaimed job resumed once the lender's run ended, and completed"""
        tolerant.refresh_from_db()
        return tolerant.state == JobState.SUCCEEDED

    wait_for(completed, timeout=RUN_WAIT)
    assert tolerant.preemptions == 1 and tolerant.run == 2

    lead = sign_in("lead-vision")
    lead.goto(f"/jobs/{tolerant.pk}/")
    judge = lead.locator("#judge-output")
    judge.get_by_label("Note (what you checked)").fill("Eval score matches the reference.")
    judge.get_by_role("button", name="Output is valid").click()
    lead.goto(f"/workloads/{w.workload.pk}/")
    expect(lead.locator("h1")).to_contain_text("recovery verified")
    history = lead.locator("table.recovery-history")
    expect(history).to_contain_text("verified")
    expect(history.get_by_role("link", name=f"job {tolerant.pk}")).to_be_visible()

    # No retries left: the next reclaim fails the job and opens a decision.
    share = shares.share_update(
        actor=w.admin,
        share=w.borrower,
        version=w.borrower.version,
        changes={"preemption_retries": 0},
        reason="E2E: no retries.",
    )
    assert share.preemption_retries == 0
    doomed = jobs.job_submit(
        actor=w.lead,
        share=w.borrower,
        name="e2e-doomed",
        preferences=two_g5,
        duration=900,
        checkpoint_interval=60,
        workload=w.workload.pk,
    )
    _reclaim(w, doomed, "e2e-lender-second")
    decision = wait_for(lambda: Decision.objects.filter(job=doomed).first(), timeout=RUN_WAIT)
    assert Job.objects.get(pk=doomed.pk).state == JobState.FAILED

    lead.goto(f"/teams/{w.borrower.team_id}/")
    decisions = lead.locator("section.decisions")
    expect(decisions).to_contain_text("e2e-doomed")
    decisions.get_by_role("link", name=str(decision.pk), exact=True).click()
    expect(lead).to_have_url(re.compile(rf"/decisions/{decision.pk}/$"))
    expect(lead.locator("#resubmit_preferences")).to_have_value(f"{G5} 2")
    # Within the share's own g5 this time: nothing to reclaim.
    lead.locator("#resubmit_name").fill("e2e-doomed-again")
    lead.locator("#resubmit_preferences").fill(f"{G5} 1")
    lead.locator("#resubmit_note").fill("Run on our own g5: no borrowing, no reclaim.")
    lead.get_by_role("button", name="Resubmit").click()
    expect(lead.locator("h1")).to_contain_text("resubmitted")
    again = Job.objects.get(name="e2e-doomed-again")
    expect(lead.get_by_role("link", name=f"e2e-doomed-again ({again.pk})")).to_be_visible()
    decision.refresh_from_db()
    assert decision.state == "resubmitted" and decision.resubmitted_job_id == again.pk
    assert again.preferences == [{"instance_type": G5, "count": 1}]
    assert again.workload_id == w.workload.pk

    def runs_on_its_own() -> bool:
        """the resubmitted job runs within the share's own capacity"""
        again.refresh_from_db()
        return again.state in (JobState.RUNNING, JobState.SUCCEEDED) and again.borrowed == 0

    wait_for(runs_on_its_own, timeout=RUN_WAIT)
