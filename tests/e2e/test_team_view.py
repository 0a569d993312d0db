"""A lead sees the estimate on a pending job (issue 12), in headless Chromium against a
live server and a real Celery worker.

``e2e-fleet`` (tests/e2e/conftest.py) has one ml.g5.xlarge of vision's ``e2e-share``:
``e2e-runner`` (priority 50, ten days of work) runs on it and ``e2e-urgent`` waits
behind it. lead-vision opens Teams: vision comes first, with e2e-urgent, its reason and
an estimated start (when e2e-runner's work is done); the job page says the same, with
how it was estimated.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Job, JobState
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_lead_sees_the_estimate_on_a_pending_job(demo_world: Any, sign_in: Any) -> None:
    def runner_started() -> bool:
        """the worker has started e2e-runner"""
        return Job.objects.get(pk=demo_world.runner.pk).state == JobState.RUNNING

    wait_for(runner_started)
    lead = sign_in("lead-vision")
    lead.get_by_role("link", name="Teams", exact=True).click()
    expect(lead).to_have_url(re.compile(r"/teams/$"))
    first = lead.locator(".team-block").first
    expect(first.locator("h2").first).to_contain_text("vision")
    row = first.locator(".team-pending tr", has_text="e2e-urgent")
    expect(row).to_be_visible()
    # Ten days of work on a fleet running DEMO_TIME_FACTOR times the clock: a start
    # some hours ahead, written as a relative time ("in ...").
    expect(row.locator(".estimated-start")).to_contain_text(re.compile(r"^in\s"))
    expect(first).to_contain_text("engine playback, remaining work known for")

    row.get_by_role("link", name="e2e-urgent").click()
    expect(lead).to_have_url(re.compile(rf"/jobs/{demo_world.urgent.pk}/$"))
    forecast = lead.locator("#forecast")
    expect(forecast).to_contain_text("When it may start")
    expect(forecast.locator(".estimated-start")).to_contain_text(re.compile(r"^in\s"))
    expect(forecast).to_contain_text("remaining work known for")
