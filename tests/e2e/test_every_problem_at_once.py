"""Forms report every problem at once (issue 33), in Chromium: each form filled with
several mistakes, some the form's own parsing finds (a negative count, a bad address),
some only the service's rules know (a duplicate name, a band the user may not use, an
end before the start, an expiry in the past), and every message is on the page after
one submit, beside its field, in words. The rules are the ones the API applies (the
service's), so nothing is stored."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from governance.models import CapacityPlan, Job, JobQueue, PriorityException, Share
from tests.e2e.test_forms import demo  # noqa: F401  # the demo world, passwords = names

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo"),
]


def messages_beside(page: Any, field_id: str) -> str:
    return str(page.locator(f"#{field_id}_errors").inner_text())


def test_new_plan_reports_all_its_problems(sign_in: Any) -> None:
    existing = CapacityPlan.objects.select_related("share").first()
    assert existing is not None
    page = sign_in("admin")
    page.goto("/plans/new/")
    page.select_option("#id_share", str(existing.share_id))
    page.fill("#id_name", existing.name)  # taken in that queue: only the service knows
    page.select_option("#id_instance_type", existing.instance_type.name)
    page.fill("#id_count", "-2")  # the form's own check
    start = timezone.now() + timedelta(days=3)
    page.fill("#id_start", start.strftime("%Y-%m-%dT%H:%M"))
    page.fill("#id_end", (start - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))
    page.fill("#id_hourly_price", "-1")
    page.get_by_role("button", name="Create plan").click()
    expect(page.locator("#id_count_errors")).to_be_visible()
    assert "already has a plan named" in messages_beside(page, "id_name")
    assert "greater than or equal to 0" in messages_beside(page, "id_count")
    assert "The end must be after the start." in messages_beside(page, "id_end")
    assert messages_beside(page, "id_hourly_price")
    assert CapacityPlan.objects.count() == 1


def test_job_form_reports_the_band_with_the_counts(sign_in: Any) -> None:
    share = Share.objects.get(name="vision-training")
    type_name = share.limits.select_related("instance_type").first().instance_type.name
    page = sign_in("member-vision")
    page.goto("/jobs/new/")
    page.evaluate("document.querySelector('form[data-share-types]').noValidate = true")
    page.select_option("#id_share", str(share.pk))
    page.fill("#id_name", "too-urgent")
    page.fill("#id_priority", "900")  # above a member's band: only the service knows
    page.select_option('select[name="pref_type_0"]', type_name)
    page.fill('input[name="pref_count_0"]', "0")
    page.fill("#id_duration", "0")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#id_priority_errors")).to_be_visible()
    assert "above the highest you may use" in messages_beside(page, "id_priority")
    assert messages_beside(page, "id_pref_count_0")
    assert messages_beside(page, "id_duration")
    assert not Job.objects.filter(name="too-urgent").exists()


def test_exception_form_reports_a_past_expiry_with_the_rest(sign_in: Any) -> None:
    page = sign_in("lead-vision")
    page.goto("/exceptions/new/")
    page.locator("#id_job").select_option(index=1)
    page.fill("#id_priority", "5")  # a priority the lead may already use
    page.fill("#id_justification", "")  # required
    past = timezone.now() - timedelta(days=1)
    page.fill("#id_expires_at", past.strftime("%Y-%m-%dT%H:%M"))
    before = PriorityException.objects.count()
    page.get_by_role("button", name="File exception").click()
    expect(page.locator("#id_justification_errors")).to_be_visible()
    assert "The expiry must be in the future." in messages_beside(page, "id_expires_at")
    assert "You may already use priority 5" in messages_beside(page, "id_priority")
    assert PriorityException.objects.count() == before


def test_new_user_reports_the_taken_name_with_the_address(sign_in: Any) -> None:
    page = sign_in("admin")
    page.goto("/admin/users/new/")
    page.fill("#id_username", "lead-vision")  # taken: only the service knows
    page.fill("#id_email", "not an address")
    page.fill("#id_reason", "Several mistakes at once.")
    page.get_by_role("button", name="Create user").click()
    expect(page.locator("#id_email_errors")).to_be_visible()
    assert "already exists" in messages_beside(page, "id_username")
    assert "valid email" in messages_beside(page, "id_email")


def test_whatif_form_reports_the_window_with_the_proposal(sign_in: Any) -> None:
    queue = JobQueue.objects.get(name="gpu-fleet")
    page = sign_in("admin")
    page.goto(f"/queues/{queue.pk}/whatif/")
    page.fill("#id_from", "last tuesday")
    page.locator('input[name^="capacity-"]').first.fill("-3")
    page.locator('input[name$="-borrow_limit"]').first.fill("lots")
    page.get_by_role("button", name="Run the what-if").click()
    errors = page.locator(".whatif-form .errorlist")
    expect(errors.first).to_be_visible()
    text = " ".join(errors.all_inner_texts())
    assert "is not an ISO 8601 date" in text
    assert "A whole number from 0 to" in text
    assert "Must be -1 (unlimited) or a percent" in text
    assert "shares." not in text and "capacity." not in text  # no code names


def test_band_form_reports_a_taken_name_with_a_bad_range(sign_in: Any) -> None:
    from governance.models import PriorityDefinition

    taken = PriorityDefinition.objects.order_by("min_priority").first()
    assert taken is not None
    page = sign_in("admin")
    page.goto("/priorities/new/")
    page.evaluate("document.querySelector('main form').noValidate = true")
    page.fill("#id_name", taken.name)  # taken: only the service knows
    page.fill("#id_min_priority", "10000")  # the form's own bound
    page.fill("#id_max_priority", "20")
    page.locator("main form button.primary").click()
    expect(page.locator("#id_min_priority_errors")).to_be_visible()
    assert "already exists" in messages_beside(page, "id_name")
    assert "9999" in messages_beside(page, "id_min_priority")


def test_agreement_form_reports_its_promises_problems_with_the_rest(sign_in: Any) -> None:
    from governance.models import Agreement

    share = Share.objects.select_related("queue").get(name="vision-training")
    page = sign_in("admin")
    page.goto("/agreements/new/")
    page.fill("#id_title", "")  # required: the form's own check
    # No share linked, yet the promise is about one: only the service knows.
    page.select_option("#id_promise_figure", "goodput")
    page.select_option("#id_promise_subject", f"share:{share.pk}")
    page.select_option("#id_promise_comparison", ">=")
    page.fill("#id_promise_threshold", "1.5")  # goodput is a fraction: the service's rule
    page.fill("#id_promise_window_days", "400")  # beyond a year: the service's bound
    before = Agreement.objects.count()
    page.get_by_role("button", name="Create agreement").click()
    expect(page.locator("#id_title_errors")).to_be_visible()
    assert "required" in messages_beside(page, "id_title")
    assert "Not a share of this agreement." in messages_beside(page, "id_promise_subject")
    assert "goodput is a fraction: give a number from 0 to 1." in messages_beside(
        page, "id_promise_threshold"
    )
    assert "A whole number of days from 1 to 365." in messages_beside(
        page, "id_promise_window_days"
    )
    assert "promises[" not in page.locator("main").inner_text()  # no code names
    assert Agreement.objects.count() == before
