"""A lead sees what rests on borrowed capacity (docs/insight.md, "Entitled and
borrowed"), in headless Chromium against a live server and a real Celery worker.

In the demo's inference pool vision's ``vision-embed-backfill`` borrows one of speech's
idle instances. lead-vision opens Teams: vision's block lists it under "Running on
borrowed capacity", lent by speech and open to reclaim, and its waiting ``e2e-urgent``
has a start on its share's entitlement alone beside the estimate. The backfill's page
shows its exposure and that its running was on capacity speech lent.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Job, JobState
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_lead_sees_borrowed_runs_and_starts_on_the_entitlement(
    demo_world: Any, sign_in: Any
) -> None:
    def backfill_runs() -> bool:
        """the worker has started vision-embed-backfill and e2e-runner"""
        return {
            state
            for state in Job.objects.filter(
                name__in=["vision-embed-backfill", "e2e-runner"]
            ).values_list("state", flat=True)
        } == {JobState.RUNNING}

    wait_for(backfill_runs)
    lead = sign_in("lead-vision")
    lead.get_by_role("link", name="Teams", exact=True).click()
    first = lead.locator(".team-block").first
    urgent = first.locator(".team-pending tr", has_text="e2e-urgent")
    expect(urgent.locator(".entitled-start")).to_contain_text(re.compile(r"^in\s"))
    borrowed = first.locator(".team-borrowed tr", has_text="vision-embed-backfill")
    expect(borrowed).to_contain_text("may be reclaimed")
    expect(borrowed).to_contain_text("lent by speech (share speech-serving")

    borrowed.get_by_role("link", name="vision-embed-backfill").click()
    expect(lead.locator("#exposure")).to_contain_text("may be reclaimed")
    expect(lead.locator("#borrowed-progress")).to_contain_text(
        "on borrowed capacity, lent by speech (share speech-serving)."
    )
