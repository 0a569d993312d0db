"""Agreements that keep score, end to end in headless Chromium against a live server and
a real Celery worker (docs/agreements.md): a reviewer adds a promise to an agreement,
sees it broken by the demo's history, runs a what-if from the strict-partitions
baseline, sees the promise kept on the proposed side and attaches the result as
evidence."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Agreement, JobQueue, WhatIf

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def vision_agreement(demo_world: Any) -> Agreement:
    from django.contrib.auth import get_user_model

    from governance.demo import history as demo_history
    from governance.services import agreements

    assert demo_history.load_history(days=1) > 0
    agreement = Agreement.objects.get(title="Vision training allocation")
    # The owner asks the reviewer to keep the agreement's score with them.
    return agreements.agreement_update(
        actor=get_user_model().objects.get(username="admin"),
        agreement=agreement,
        version=agreement.version,
        editors=["reviewer"],
        reason="The reviewer keeps its promises with us.",
    )


def test_reviewer_adds_a_promise_sees_it_broken_and_kept_under_strict_partitions(
    vision_agreement: Agreement, sign_in: Any
) -> None:
    fleet = JobQueue.objects.get(name="gpu-fleet")
    share = vision_agreement.shares.get()
    reviewer = sign_in("reviewer")
    reviewer.goto(f"/agreements/{vision_agreement.pk}/")
    reviewer.get_by_role("link", name="Edit").click()
    reviewer.select_option("#id_promise_figure", "preemptions_suffered.reclaim")
    reviewer.select_option("#id_promise_subject", f"share:{share.pk}")
    reviewer.select_option("#id_promise_comparison", "<=")
    reviewer.fill("#id_promise_threshold", "0")
    reviewer.fill("#id_promise_window_days", "7")
    reviewer.fill("#id_reason", "Vision's runs are never reclaimed.")
    reviewer.get_by_role("button", name=re.compile("Save as version")).click()
    reviewer.wait_for_url(re.compile(rf"/agreements/{vision_agreement.pk}/$"))
    promises = reviewer.locator("#promises")
    mine = promises.locator(
        "tr.promise", has=reviewer.locator("code", has_text="preemptions_suffered.reclaim")
    )
    expect(mine).to_contain_text("not evaluated yet")

    # Vision borrowed in the demo's day and was reclaimed from: broken.
    reviewer.get_by_role("button", name="Evaluate now").click()
    expect(mine.locator(".badge.broken")).to_be_visible()
    expect(mine.locator("svg.promise-chart")).to_be_visible()
    value = mine.locator("td.num a")
    expect(value).to_have_attribute("href", re.compile(rf"share={share.pk}"))
    assert float(value.inner_text()) >= 1

    # The what-if from the strict-partitions baseline: nobody borrows, nobody is reclaimed.
    reviewer.goto(f"/queues/{fleet.pk}/whatif/")
    reviewer.get_by_role("link", name="strict partitions").click()
    expect(reviewer.locator('input[name="baseline"]')).to_have_value("strict_partitions")
    reviewer.get_by_role("button", name="Run the what-if").click()
    reviewer.wait_for_url(re.compile(r"/whatif/\d+/$"))
    table = reviewer.locator("#whatif-promises")
    expect(table).to_be_visible(timeout=90_000)
    row = table.locator("tr", has=reviewer.locator("code", has_text="preemptions_suffered.reclaim"))
    expect(row.locator("td.promise-proposed .badge")).to_have_text("kept")
    expect(reviewer.locator("#whatif-summary")).to_contain_text("Share vision-training:")
    run = WhatIf.objects.get()
    assert run.proposal["baseline"] == "strict_partitions"
    assert run.proposal["shares"]["vision-training"]["policy"] == "RESERVE"

    reviewer.locator('select[name="agreement"]').select_option(str(vision_agreement.pk))
    reviewer.get_by_role("button", name="Attach as evidence").click()
    expect(reviewer.get_by_text("Attached to the agreement as evidence.")).to_be_visible()
    run.refresh_from_db()
    assert run.agreement_id == vision_agreement.pk
