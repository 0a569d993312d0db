"""Change request pages: a lead files from the share page, the share page and the team
view show it, an admin reviews it (confirming a share changed meanwhile) and decides."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from governance.models import ChangeRequestState, Share, ShareChangeRequest
from governance.services import shares as share_svc
from tests.factories import make_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(**extra: Any) -> dict[str, Any]:
    data = {
        "limit_type_0": G5,
        "limit_count_0": "3",
        "limit_type_1": P4,
        "limit_count_1": "1",
        "policy": "RESERVE",
        "justification": "A second training line starts Monday.",
    }
    data.update(extra)
    return data


def test_a_lead_files_and_an_admin_approves_after_confirming_a_change() -> None:
    w = make_world()
    lead = signed_in(w.red_lead)
    page = lead.get(f"/shares/{w.red_share.pk}/").content.decode()
    assert f"/shares/{w.red_share.pk}/request/" in page
    assert (
        "Request a change"
        not in signed_in(w.blue_lead).get(f"/shares/{w.red_share.pk}/").content.decode()
    )
    assert signed_in(w.blue_lead).get(f"/shares/{w.red_share.pk}/request/").status_code == 403

    preview = lead.post(f"/shares/{w.red_share.pk}/request/", form(preview="1"))
    assert preview.status_code == 200 and not ShareChangeRequest.objects.exists()
    assert "2 \u00d7 ml.g5.xlarge" in preview.content.decode()  # the diff: from 2 to 3
    empty = lead.post(f"/shares/{w.red_share.pk}/request/", form(justification=""))
    assert empty.status_code == 400 and not ShareChangeRequest.objects.exists()

    filed = lead.post(f"/shares/{w.red_share.pk}/request/", form())
    cr = ShareChangeRequest.objects.get()
    assert filed.status_code == 302 and filed["Location"] == f"/change-requests/{cr.pk}/"
    assert cr.proposed == {"limits": {G5: 3, P4: 1}}  # only what differs
    assert f"/change-requests/{cr.pk}/" in lead.get(f"/shares/{w.red_share.pk}/").content.decode()
    assert f"/change-requests/{cr.pk}/" in lead.get("/teams/").content.decode()

    share_svc.share_update(
        actor=w.admin,
        share=w.red_share.pk,
        version=w.red_share.version,
        changes={"policy": "LEND"},
        reason="lend meanwhile",
    )
    admin = signed_in(w.admin)
    assert "1 share change request to review" in admin.get("/admin/").content.decode()
    listing = admin.get("/change-requests/").content.decode()
    assert "To review" in listing and f"/change-requests/{cr.pk}/" in listing
    detail = admin.get(f"/change-requests/{cr.pk}/").content.decode()
    assert "The share changed since this request was filed" in detail
    assert "Preview now" in detail and 'name="confirm_version"' in detail

    unconfirmed = admin.post(f"/change-requests/{cr.pk}/approve/", {"note": "ok"})
    assert unconfirmed.status_code == 409
    assert ShareChangeRequest.objects.get().state == ChangeRequestState.PENDING
    version = Share.objects.get(pk=w.red_share.pk).version
    done = admin.post(
        f"/change-requests/{cr.pk}/approve/", {"note": "ok", "confirm_version": str(version)}
    )
    assert done.status_code == 302
    share = Share.objects.get(pk=w.red_share.pk)
    assert share_svc.limits_map(share) == {G5: 3, P4: 1} and share.policy == "LEND"
    page = admin.get(f"/change-requests/{cr.pk}/").content.decode()
    assert "Preview when decided" in page and "change_request.approved" in page


def test_reject_needs_a_note_beside_the_field_and_the_requester_withdraws() -> None:
    w = make_world()
    lead = signed_in(w.red_lead)
    lead.post(f"/shares/{w.red_share.pk}/request/", form())
    cr = ShareChangeRequest.objects.get()
    admin = signed_in(w.admin)
    refused = admin.post(f"/change-requests/{cr.pk}/reject/", {"note": ""})
    assert refused.status_code == 400 and "Say why" in refused.content.decode()
    assert admin.post(f"/change-requests/{cr.pk}/withdraw/").status_code == 403
    assert lead.post(f"/change-requests/{cr.pk}/withdraw/", {"note": "later"}).status_code == 302
    assert ShareChangeRequest.objects.get().state == ChangeRequestState.WITHDRAWN


def test_a_lead_proposes_borrowing_only_for_verified_recovery() -> None:
    w = make_world()
    lead = signed_in(w.red_lead)
    page = lead.get(f"/shares/{w.red_share.pk}/request/").content.decode()
    assert 'name="borrow_requires_verified_recovery"' in page
    filed = lead.post(
        f"/shares/{w.red_share.pk}/request/", form(borrow_requires_verified_recovery="on")
    )
    assert filed.status_code == 302
    cr = ShareChangeRequest.objects.get()
    assert cr.proposed["borrow_requires_verified_recovery"] is True
    detail = lead.get(f"/change-requests/{cr.pk}/").content.decode()
    assert "Borrowing requires verified recovery" in detail
