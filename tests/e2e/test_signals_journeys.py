"""Signals and what-if end to end in headless Chromium against a live server and a real
Celery worker (issue 12): a reviewer opens Signals and follows a figure to the jobs
behind it; an admin runs a what-if, watches it finish and attaches it to an agreement."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Agreement, AuditEntry, AuditEvent, Job, JobQueue, Share, WhatIf

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def history_world(demo_world: Any) -> Any:
    from governance.demo import history as demo_history

    assert demo_history.load_history(days=1) > 0
    return JobQueue.objects.get(name="gpu-fleet")


def test_reviewer_opens_signals_and_follows_a_figure_to_the_jobs(
    history_world: JobQueue, sign_in: Any
) -> None:
    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name="Signals").click()
    reviewer.locator('form.filters select[name="queue"]').select_option(str(history_world.pk))
    reviewer.locator('form.filters select[name="preset"]').select_option("7d")
    reviewer.get_by_role("button", name="Show").click()
    reviewer.wait_for_url(re.compile(rf"queue={history_world.pk}"))  # htmx pushes the URL
    expect(reviewer.locator("#signals-results")).to_contain_text("gpu-fleet, from")
    expect(reviewer.locator(".hbars").first).to_be_visible()
    expect(reviewer.locator(".hbars")).to_have_count(4)
    # The figure: jobs finished of one share, a link to the jobs behind it.
    share = Share.objects.get(queue=history_world, name="vision-training")
    row = reviewer.locator(
        "table.figures tr", has=reviewer.locator("code", has_text="jobs_finished")
    )
    headers = reviewer.locator("table.figures thead th").all_inner_texts()
    columns = [c.strip().lower() for c in headers]  # headers are shown upper-cased
    assert "vision-training" in columns, columns
    cell = row.locator("td").nth(columns.index("vision-training"))
    total = int(re.match(r"(\d+)", cell.inner_text()).group(1))
    assert total > 0
    cell.get_by_role("link").click()
    reviewer.wait_for_url(re.compile(r"/jobs/\?"))
    assert f"share={share.pk}" in reviewer.url and "finished_after=" in reviewer.url
    finished = Job.objects.filter(share=share, finished_at__isnull=False)
    rows = reviewer.locator("table.card-table tbody tr")
    expect(rows.first).to_be_visible()
    shown = min(total, 50)
    expect(rows).to_have_count(shown)
    names = set(finished.values_list("name", flat=True))
    for text in rows.locator("td:first-child a").all_inner_texts():
        assert text in names
    expect(reviewer.locator("nav.pager")).to_contain_text(f"of {total}")


def test_admin_runs_a_whatif_and_attaches_it_to_an_agreement(
    history_world: JobQueue, sign_in: Any
) -> None:
    admin = sign_in("admin")
    admin.goto(f"/queues/{history_world.pk}/")
    admin.get_by_role("link", name=re.compile("What-if")).click()
    share = Share.objects.get(queue=history_world, name="language-pretraining")
    admin.fill(f'input[name="share-{share.pk}-borrow_limit"]', "0")
    admin.get_by_role("button", name="Run the what-if").click()
    admin.wait_for_url(re.compile(r"/whatif/\d+/$"))
    # The worker replays both sides; the page follows its progress and shows the result.
    expect(admin.get_by_role("heading", name="language-pretraining")).to_be_visible(timeout=60_000)
    expect(admin.locator(".whatif-compare")).to_contain_text("Borrowed instance-hours")
    run = WhatIf.objects.get()
    assert run.state == "DONE" and run.proposal["shares"] == {
        "language-pretraining": {"borrow_limit": 0}
    }
    agreement = Agreement.objects.filter(shares=share).first()
    assert agreement is not None
    admin.locator('select[name="agreement"]').select_option(str(agreement.pk))
    admin.get_by_role("button", name="Attach as evidence").click()
    expect(admin.get_by_text("Attached to the agreement as evidence.")).to_be_visible()
    # (the promises table above links the agreement too: the evidence section's link)
    evidence = admin.locator("section", has=admin.get_by_role("heading", name="Evidence"))
    expect(evidence.get_by_role("link", name=agreement.title)).to_be_visible()
    run.refresh_from_db()
    assert run.agreement_id == agreement.pk
    assert AuditEntry.objects.filter(event_type=AuditEvent.WHATIF_ATTACHED).exists()
