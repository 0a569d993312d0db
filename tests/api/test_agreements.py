"""Agreements API: create/patch rules, 409 on a stale version, versions, search, matrix."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from governance.models import Agreement
from governance.services import agreements as svc
from tests.factories import make_world

pytestmark = pytest.mark.django_db

ROLES = {
    "anonymous": None,
    "member": "red_member",
    "lead_own": "red_lead",
    "lead_other": "blue_lead",
    "reviewer": "reviewer",
    "admin": "admin",
}


@pytest.fixture
def w() -> Any:
    return make_world()


def client_for(w: Any, role: str) -> APIClient:
    client = APIClient()
    if ROLES[role] is not None:
        client.force_authenticate(getattr(w, ROLES[role]))
    return client


def existing(w: Any) -> Agreement:
    """Owned by red_lead, blue_lead not involved; red_member is not an editor."""
    return svc.agreement_create(
        actor=w.red_lead, title="Red reserve", body="Nightly training.", shares=[w.red_share.pk]
    )


def test_create_and_read(w: Any) -> None:
    response = client_for(w, "lead_own").post(
        "/api/agreements/",
        {
            "title": "Red reserve",
            "body": "Red keeps two g5.",
            "shares": [w.red_share.pk],
            "reclaim_assumptions": "one hour",
            "recovery_assumptions": "hourly checkpoints",
            "editors": ["red_member"],
            "review_by": "2030-01-31",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["owner"] == "red_lead"
    assert data["editors"] == ["red_member"]
    assert data["shares"] == [w.red_share.pk]
    assert data["version"] == 1
    assert data["review_by"] == "2030-01-31"
    assert [v["version"] for v in data["versions"]] == [1]
    assert data["versions"][0]["edited_by"] == "red_lead"
    assert data["versions"][0]["shares"] == [w.red_share.pk]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"title": ""}, "title"),
        ({"shares": [999999]}, "shares"),
        ({"owner": "ghost"}, "owner"),
        ({"editors": ["ghost"]}, "editors"),
        ({"review_by": "soon"}, "review_by"),
    ],
)
def test_create_400_names_field(w: Any, fields: dict[str, Any], field: str) -> None:
    data = {"title": "t", **fields}
    response = client_for(w, "admin").post("/api/agreements/", data, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not Agreement.objects.exists()


def test_lead_linking_other_teams_share_names_shares(w: Any) -> None:
    response = client_for(w, "lead_own").post(
        "/api/agreements/", {"title": "t", "shares": [w.blue_share.pk]}, format="json"
    )
    assert response.status_code == 403
    assert "shares" in response.json()


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {403}),
        ("lead_own", {201}),
        ("lead_other", {201}),  # any lead may create (linking only their teams' shares)
        ("reviewer", {403}),
        ("admin", {201}),
    ],
)
def test_create_permissions(w: Any, role: str, expected: set[int]) -> None:
    response = client_for(w, role).post("/api/agreements/", {"title": "t"}, format="json")
    assert response.status_code in expected


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {403}),
        ("lead_own", {200}),  # the owner
        ("lead_other", {403}),
        ("reviewer", {403}),
        ("admin", {200}),
    ],
)
def test_patch_permissions(w: Any, role: str, expected: set[int]) -> None:
    agreement = existing(w)
    response = client_for(w, role).patch(
        f"/api/agreements/{agreement.pk}/", {"version": 1, "body": "new"}, format="json"
    )
    assert response.status_code in expected
    agreement.refresh_from_db()
    assert agreement.body == ("new" if 200 in expected else "Nightly training.")


def test_editor_may_patch(w: Any) -> None:
    agreement = existing(w)
    agreement.editors.add(w.red_member)
    response = client_for(w, "member").patch(
        f"/api/agreements/{agreement.pk}/", {"version": 1, "body": "b"}, format="json"
    )
    assert response.status_code == 200


def test_patch_versions_and_stale_409(w: Any) -> None:
    agreement = existing(w)
    client = client_for(w, "lead_own")
    url = f"/api/agreements/{agreement.pk}/"
    first = client.patch(
        url, {"version": 1, "title": "Red reserve v2", "reason": "more"}, format="json"
    )
    assert first.status_code == 200
    data = first.json()
    assert data["version"] == 2
    assert [(v["version"], v["title"], v["reason"]) for v in data["versions"]] == [
        (1, "Red reserve", "created"),
        (2, "Red reserve v2", "more"),
    ]
    stale = client.patch(url, {"version": 1, "title": "late"}, format="json")
    assert stale.status_code == 409
    assert "version" in stale.json()
    agreement.refresh_from_db()
    assert agreement.title == "Red reserve v2"


def test_patch_without_version_400(w: Any) -> None:
    agreement = existing(w)
    response = client_for(w, "admin").patch(
        f"/api/agreements/{agreement.pk}/", {"title": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "version" in response.json()


def test_patch_blank_title_400(w: Any) -> None:
    agreement = existing(w)
    response = client_for(w, "admin").patch(
        f"/api/agreements/{agreement.pk}/", {"version": 1, "title": ""}, format="json"
    )
    assert response.status_code == 400
    assert "title" in response.json()


def test_search_ranked(w: Any) -> None:
    title_hit = svc.agreement_create(actor=w.admin, title="Reclaim budget", body="")
    assumption_hit = svc.agreement_create(
        actor=w.admin, title="Other", reclaim_assumptions="reclaim at most daily"
    )
    svc.agreement_create(actor=w.admin, title="Nothing", body="unrelated")
    client = client_for(w, "member")
    data = client.get("/api/agreements/?search=reclaim").json()
    assert [a["id"] for a in data["results"]] == [title_hit.pk, assumption_hit.pk]
    assert client.get("/api/agreements/").json()["count"] == 3
    assert client.get("/api/agreements/?search=zebra").json()["count"] == 0


def test_anonymous_reads_nothing(w: Any) -> None:
    assert client_for(w, "anonymous").get("/api/agreements/").status_code in {401, 403}
