"""The lending ledger and the change request pages at 400 px and 1400 px: no page wider
than the window, no two table headers on top of each other (the checks of
``test_layout.py``), on the demo world with its played history."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from governance import demo
from governance.models import Share, ShareChangeRequest
from tests.e2e.test_layout import WIDTHS, check, layout_world  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_ledger_and_change_request_pages_fit_the_window(
    layout_world: Any,  # noqa: F811
    sign_in: Any,
) -> None:
    lender = Share.objects.get(queue__name=demo.LENDING_QUEUE, name="speech-serving")
    borrower = Share.objects.get(name="vision-training")
    request = ShareChangeRequest.objects.get()
    admin = sign_in("admin")
    lead = sign_in("lead-language")
    for width in WIDTHS.values():
        for page in (admin, lead):
            page.set_viewport_size({"width": width, "height": 900})
        admin.goto(f"/shares/{lender.pk}/ledger/")
        expect(admin.locator(".ledger-lent")).to_contain_text("language-eval")
        check(admin, f"lender's ledger {width}")
        admin.goto(f"/shares/{borrower.pk}/ledger/?window=7d")
        check(admin, f"borrower's ledger {width}")
        admin.goto("/change-requests/")
        check(admin, f"change requests {width}")
        admin.goto(f"/change-requests/{request.pk}/")
        expect(admin.locator(".current-preview")).to_be_visible()
        check(admin, f"change request {width}")
        lead.goto(f"/shares/{request.share_id}/request/")
        check(lead, f"request form {width}")
