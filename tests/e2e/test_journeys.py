"""Three journeys end to end in headless Chromium against a live server and a real
Celery worker (issue 5): an admin's share edit with its preview and audit entry; an
exception filed, approved and turned into a preemption that the overview's live feed
shows without a reload; the audit trail filtered and exported as CSV.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import AuditEntry, AuditEvent, Job, JobState, Share, Team
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FEED_WAIT_MS = 8_000  # the feed polls every 2 s; the worker decides within a second


def test_admin_edits_a_share_sees_the_preview_saves_with_a_reason_and_finds_the_audit_entry(
    demo_world: Any, sign_in: Any
) -> None:
    share = Share.objects.get(name="vision-training")
    admin = sign_in("admin")

    admin.get_by_role("link", name="Queues", exact=True).click()
    admin.get_by_role("link", name="gpu-fleet").first.click()
    admin.get_by_role("link", name="vision-training").first.click()
    admin.get_by_role("link", name="Edit share").click()
    expect(admin).to_have_url(re.compile(rf"/shares/{share.pk}/edit/$"))
    expect(admin.locator("#preview")).to_contain_text("Change a value to see")

    # Typing a new borrow limit asks for the preview (keyup, 400 ms debounce).
    borrow = admin.get_by_label("Borrow limit (%)")
    borrow.fill("")
    borrow.press_sequentially("50")
    preview = admin.locator("#preview")
    expect(preview).to_contain_text("What this change would do")
    expect(preview.locator(".diff")).to_contain_text("Borrow limit")
    expect(preview.locator(".diff del")).to_have_text("100%")
    expect(preview.locator(".diff ins")).to_have_text("50%")
    expect(preview).to_contain_text("Would be preempted by the next cycle")
    share.refresh_from_db()
    assert share.borrow_limit == 100, "the preview must not save anything"

    reason = "E2E: halve vision's borrowing while language catches up."
    admin.get_by_label("Reason for this change (required)").fill(reason)
    admin.get_by_role("button", name="Save share").click()
    expect(admin).to_have_url(re.compile(rf"/shares/{share.pk}/$"))
    expect(admin.locator(".messages")).to_contain_text("Share vision-training saved as version")
    share.refresh_from_db()
    assert share.borrow_limit == 50

    # The audit trail, filtered to this share's updates, shows the entry with its reason.
    admin.get_by_role("link", name="Audit trail").click()
    admin.locator('form.filters select[name="event_type"]').select_option("share.updated")
    admin.locator('form.filters select[name="share"]').select_option(str(share.pk))
    admin.get_by_role("button", name="Filter").click()
    results = admin.locator("#audit-results")
    expect(results.locator("tbody tr")).to_have_count(1)
    row = results.locator("tbody tr").first
    expect(row).to_contain_text("share.updated")
    expect(row).to_contain_text("admin")
    expect(row).to_contain_text(reason)
    change = row.locator("dt:text-is('borrow_limit') + dd")
    expect(change.locator("del")).to_have_text("100")
    expect(change.locator("ins")).to_have_text("50")
    entry = AuditEntry.objects.get(event_type=AuditEvent.SHARE_UPDATED, share_id=share.pk)
    assert entry.actor.username == "admin" and entry.reason == reason
    assert entry.before["borrow_limit"] == 100 and entry.after["borrow_limit"] == 50


def test_approved_exception_raises_the_job_and_its_preemption_reaches_the_live_feed(
    demo_world: Any, sign_in: Any
) -> None:
    runner, urgent = demo_world.runner, demo_world.urgent
    wait_for(lambda: Job.objects.get(pk=runner.pk).state == JobState.RUNNING)
    assert Job.objects.get(pk=urgent.pk).state == JobState.PENDING

    # Someone watches the overview; this page is never reloaded.
    watcher = sign_in("member-vision")
    watcher.goto("/")
    feed = watcher.locator("#feed")
    expect(feed).to_contain_text("vision's e2e-runner started on ml.g5.xlarge")
    expect(feed).not_to_contain_text("preempted e2e-runner")
    watcher.evaluate("window.__e2eNoReload = true")

    # The team lead files an exception for the waiting job.
    lead = sign_in("lead-vision")
    lead.get_by_role("link", name="Exceptions", exact=True).click()
    lead.get_by_role("link", name="File an exception").click()
    lead.get_by_label("Job (active jobs of teams you lead)").select_option(str(urgent.pk))
    lead.get_by_label("Priority wanted", exact=False).fill("600")
    lead.get_by_label("Justification").fill("E2E: the release gate needs this job today.")
    lead.get_by_role("button", name="File exception").click()
    expect(lead.locator(".messages")).to_contain_text("filed")
    expect(lead.locator("h1")).to_contain_text("Pending")
    exception_id = int(re.search(r"/exceptions/(\d+)/", lead.url).group(1))  # type: ignore[union-attr]

    # A reviewer approves it from the review queue.
    reviewer = sign_in("reviewer")
    reviewer.goto("/exceptions/")
    queue = reviewer.locator("section", has=reviewer.get_by_role("heading", name="Review queue"))
    row = queue.locator("tr", has=reviewer.get_by_role("link", name=str(exception_id), exact=True))
    expect(row).to_contain_text("e2e-urgent")
    row.get_by_label(f"Note for exception {exception_id}").fill("E2E: release-blocking.")
    row.get_by_role("button", name="Approve").click()
    expect(reviewer.locator(".messages")).to_contain_text(f"Exception {exception_id} approved.")

    # The job's priority rose at once ...
    assert Job.objects.get(pk=urgent.pk).priority == 600
    reviewer.goto(f"/exceptions/{exception_id}/")
    expect(reviewer.locator(".effect")).to_contain_text("now runs at priority 600")
    # ... the worker preempts the lower-priority runner in the same share, and the
    # watcher's feed shows it without a reload.
    expect(feed).to_contain_text(
        "vision's e2e-urgent preempted e2e-runner in the same share", timeout=FEED_WAIT_MS
    )
    expect(feed.locator("li", has_text="preempted e2e-runner")).to_contain_text("higher priority")
    assert watcher.evaluate("window.__e2eNoReload === true"), "the overview was reloaded"
    assert Job.objects.get(pk=runner.pk).state == JobState.PENDING
    wait_for(lambda: Job.objects.get(pk=urgent.pk).state == JobState.RUNNING)


def test_reviewer_filters_the_audit_trail_and_downloads_matching_csv(
    demo_world: Any, sign_in: Any
) -> None:
    vision = Team.objects.get(name="vision")
    expected = set(
        AuditEntry.objects.filter(
            event_type=AuditEvent.EXCEPTION_FILED, team_id=vision.pk
        ).values_list("id", flat=True)
    )
    assert len(expected) >= 2  # the demo files two of vision's exceptions
    assert AuditEntry.objects.count() > len(expected)

    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name="Audit trail").click()
    reviewer.locator('form.filters select[name="event_type"]').select_option("exception.filed")
    reviewer.locator('form.filters select[name="team"]').select_option(str(vision.pk))
    reviewer.get_by_role("button", name="Filter").click()
    results = reviewer.locator("#audit-results tbody tr")
    expect(results).to_have_count(len(expected))
    for i in range(len(expected)):
        expect(results.nth(i)).to_contain_text("exception.filed")

    # The export link carries the filters the page shows.
    csv_link = reviewer.get_by_role("link", name="CSV", exact=True)
    expect(csv_link).to_have_attribute("href", re.compile(r"event_type=exception\.filed"))
    with reviewer.expect_download() as download_info:
        csv_link.click()
    download = download_info.value
    text = download.path().read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {int(r["id"]) for r in rows} == expected, text[:500]
    assert all(r["event_type"] == "exception.filed" for r in rows)
    assert all(r["team"] == str(vision.pk) for r in rows)
    assert download.suggested_filename.endswith(".csv")
