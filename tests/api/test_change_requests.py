"""``/api/change-requests/``: filing, listing with filters, the decisions, the 409 of an
approval after the share changed, and 400s naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from governance.models import Share
from governance.services import shares as share_svc
from tests.factories import make_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"


@pytest.fixture
def w() -> Any:
    return make_world()


def as_user(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def file(w: Any, **body: Any) -> Any:
    body.setdefault("share", w.red_share.pk)
    body.setdefault("proposed", {"limits": {G5: 3, P4: 1}})
    body.setdefault("justification", "A second training line starts Monday.")
    return as_user(w.red_lead).post("/api/change-requests/", body, format="json")


def test_file_list_and_approve(w: Any) -> None:
    created = file(w)
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["state"] == "pending" and body["requester"] == "red_lead"
    assert body["proposed"] == {"limits": {G5: 3, P4: 1}}
    assert set(body["preview"]) == {"preempted", "reclaimable", "started", "warnings"}
    assert body["base_version"] == w.red_share.version

    listed = as_user(w.blue_lead).get(f"/api/change-requests/?state=pending&team={w.red.pk}")
    assert [r["id"] for r in listed.json()["results"]] == [body["id"]]
    assert as_user(w.blue_lead).get("/api/change-requests/?state=approved").json()["count"] == 0

    refused = as_user(w.red_lead).post(f"/api/change-requests/{body['id']}/approve/", {})
    assert refused.status_code == 403
    approved = as_user(w.admin).post(
        f"/api/change-requests/{body['id']}/approve/", {"note": "ok"}, format="json"
    )
    assert approved.status_code == 200, approved.json()
    assert approved.json()["state"] == "approved"
    assert approved.json()["applied_version"] == w.red_share.version + 1
    assert share_svc.limits_map(Share.objects.get(pk=w.red_share.pk)) == {G5: 3, P4: 1}


def test_approval_after_a_change_is_409_with_the_diff_and_new_preview(w: Any) -> None:
    cr = file(w).json()
    share_svc.share_update(
        actor=w.admin,
        share=w.red_share.pk,
        version=w.red_share.version,
        changes={"preemption_retries": 2},
        reason="cap retries",
    )
    url = f"/api/change-requests/{cr['id']}/approve/"
    conflict = as_user(w.admin).post(url, {}, format="json")
    assert conflict.status_code == 409
    body = conflict.json()
    assert "confirm_version" in body
    current = body["current"]
    assert current["changed_since_filing"] == [
        {"field": "preemption_retries", "at_filing": None, "now": 2}
    ]
    assert set(current["preview"]) == {"preempted", "reclaimable", "started", "warnings"}
    confirmed = as_user(w.admin).post(
        url, {"confirm_version": current["share"]["version"]}, format="json"
    )
    assert confirmed.status_code == 200, confirmed.json()
    share = Share.objects.get(pk=w.red_share.pk)
    assert share.preemption_retries == 2 and share_svc.limits_map(share)[G5] == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"proposed": "lots"}, "changes"),
        ({"proposed": {"limits": {G5: "many"}}}, "limits"),
        ({"proposed": {"colour": "red"}}, "colour"),
        ({"justification": ""}, "justification"),
        ({"share": "abc"}, "share"),
        ({"share": 10**12}, "share"),
    ],
)
def test_bad_filings_are_400_naming_the_field(w: Any, body: dict[str, Any], field: str) -> None:
    response = file(w, **body)
    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()


def test_reject_and_withdraw(w: Any) -> None:
    first = file(w).json()
    second = file(w, proposed={"policy": "LEND"}).json()
    no_note = as_user(w.admin).post(f"/api/change-requests/{first['id']}/reject/", {})
    assert no_note.status_code == 400 and "note" in no_note.json()
    rejected = as_user(w.admin).post(
        f"/api/change-requests/{first['id']}/reject/", {"note": "not this quarter"}
    )
    assert rejected.json()["state"] == "rejected"
    assert (
        as_user(w.admin).post(f"/api/change-requests/{second['id']}/withdraw/").status_code == 403
    )
    withdrawn = as_user(w.red_lead).post(f"/api/change-requests/{second['id']}/withdraw/")
    assert withdrawn.json()["state"] == "withdrawn"
    assert as_user(w.admin).post("/api/change-requests/999999/approve/").status_code == 404
