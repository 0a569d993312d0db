"""A lead files a share change request, an admin reviews its preview and approves it,
and the lender's ledger shows the borrowers and the reclaim that follows: headless
Chromium against a live server and a real Celery worker.

In the demo's ``inference-pool`` (6 x ml.g6.48xlarge) speech lends 4: vision's backfill
(2) and language's eval sweep (3) borrow 1 and 2 of them. Speech's lead has a job for 5
that its limit of 4 never lets start, so the lead asks for a limit of 5. The admin's
preview says the next cycle would reclaim both borrowers' runs; after the approval the
worker does exactly that, and speech's ledger lists both borrowers' lent hours and the
two reclaims its job made.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from governance import demo
from governance.models import Job, JobState, Share
from governance.services import jobs
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

G6 = "ml.g6.48xlarge"
BORROWERS = ("vision-embed-backfill", "language-eval-sweep")


def test_a_change_request_approved_and_the_reclaim_on_the_lenders_ledger(
    demo_world: Any, sign_in: Any
) -> None:
    speech = Share.objects.get(queue__name=demo.LENDING_QUEUE, name="speech-serving")
    peak = jobs.job_submit(
        actor=get_user_model().objects.get(username="lead-speech"),
        share=speech,
        name="speech-serving-peak",
        preferences=[{"instance_type": G6, "count": 5}],
        priority=100,
        duration=10 * 24 * 3600,
        checkpoint_interval=600,
    )

    def borrowers_run() -> bool:
        """the worker has started both borrowers' runs on speech's idle capacity"""
        states = set(Job.objects.filter(name__in=BORROWERS).values_list("state", flat=True))
        return states == {JobState.RUNNING}

    wait_for(borrowers_run)

    lead = sign_in("lead-speech")
    lead.goto(f"/shares/{speech.pk}/ledger/")
    now = lead.locator("#now")
    expect(now.locator(".ledger-lent")).to_contain_text("vision-batch")
    expect(now.locator(".ledger-lent")).to_contain_text("language-eval")

    lead.goto(f"/shares/{speech.pk}/")
    lead.get_by_role("link", name="Request a change", exact=True).click()
    lead.fill("#id_limit_count_0", "5")
    lead.fill("#id_justification", "Serving peaks need 5 instances from next week.")
    lead.get_by_role("button", name="File request").click()
    expect(lead).to_have_url(re.compile(r"/change-requests/\d+/$"))
    expect(lead.locator("main")).to_contain_text("Waiting for an admin")
    request_url = lead.url

    admin = sign_in("admin")
    admin.goto("/change-requests/")
    review = admin.locator("#review-h").locator("xpath=..")
    expect(review).to_contain_text("speech-serving")
    admin.goto(request_url)
    preview = admin.locator(".current-preview")
    for name in BORROWERS:
        expect(preview).to_contain_text(name)  # the next cycle would reclaim them
    expect(preview).to_contain_text("limits would add up to 7")
    admin.fill("#id_note", "Approved for the serving peak; borrowers were told.")
    admin.get_by_role("button", name="Approve").click()
    expect(admin.locator("main")).to_contain_text("Approved")
    expect(admin.locator("main")).to_contain_text("Preview when decided")

    def reclaimed() -> bool:
        """the worker ran the cycle: speech's job runs, both borrowers wait again"""
        return Job.objects.get(pk=peak.pk).state == JobState.RUNNING and set(
            Job.objects.filter(name__in=BORROWERS).values_list("state", flat=True)
        ) == {JobState.PENDING}

    wait_for(reclaimed)
    lead.goto(f"/shares/{speech.pk}/ledger/")
    window = lead.locator("#window")
    lent = window.locator(".ledger-window-lent")
    expect(lent).to_contain_text("vision-batch")
    expect(lent).to_contain_text("language-eval")
    reclaims = window.locator(".ledger-window-reclaims")
    for name in BORROWERS:
        expect(reclaims).to_contain_text(name)
    expect(reclaims).to_contain_text("speech-serving-peak")
