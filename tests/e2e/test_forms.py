"""The small scripts of issue 13 in Chromium: the job form narrows each preference row to
the chosen share's types, and the share editor disables the borrow limit while another
policy than Lend and borrow is chosen (its value then not sent, so it is cleared)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from governance.models import Share, ShareLimit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(transactional_db: Any, settings: Any) -> None:
    from governance import demo as demo_data

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    demo_data.load()


def test_job_form_offers_only_the_chosen_shares_types(demo: None, sign_in: Any) -> None:
    page = sign_in("lead-vision")
    page.goto("/jobs/new/")
    choices = page.locator("#id_share option:not([value=''])")
    share_ids = [int(v) for v in choices.evaluate_all("els => els.map(e => e.value)")]
    types = {
        sid: set(
            ShareLimit.objects.filter(share_id=sid).values_list("instance_type__name", flat=True)
        )
        for sid in share_ids
    }
    every = set().union(*types.values())
    share_id = next(sid for sid in share_ids if types[sid] != every)
    foreign = sorted(every - types[share_id])[0]
    own = sorted(types[share_id])[0]
    row = page.locator('select[name="pref_type_0"]')
    expect(row.locator(f'option[value="{foreign}"]')).to_be_enabled()
    page.locator("#id_share").select_option(str(share_id))
    expect(row.locator(f'option[value="{foreign}"]')).to_be_disabled()
    expect(row.locator(f'option[value="{own}"]')).to_be_enabled()


def test_borrow_limit_follows_the_policy(demo: None, sign_in: Any) -> None:
    share = Share.objects.filter(policy="LEND_AND_BORROW").order_by("pk").first()
    assert share is not None
    page = sign_in("admin")
    page.goto(f"/shares/{share.pk}/edit/")
    borrow = page.locator("#id_borrow_limit")
    expect(borrow).to_be_enabled()
    page.locator("#id_policy").select_option("RESERVE")
    expect(borrow).to_be_disabled()
    page.get_by_label("Reason for this change (required)").fill("Stop borrowing.")
    page.get_by_role("button", name="Save share").click()
    expect(page.locator(".messages")).to_contain_text("saved")
    share.refresh_from_db()
    assert share.policy == "RESERVE" and share.borrow_limit is None
