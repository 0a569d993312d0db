"""``/api/teams/`` through the API: rules as 400s naming the field, and who may write."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, Team
from tests.factories import (
    ROLE_NAMES,
    TeamFactory,
    UserFactory,
    make_admin,
    make_lead,
    make_member,
    make_role_user,
)

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def admin_client():
    return client_for(make_admin())


def test_list_shows_usernames(admin_client):
    team = TeamFactory(name="red")
    make_lead(team, "ann")
    make_member(team, "bob")
    response = admin_client.get("/api/teams/")
    assert response.status_code == 200
    assert response.json()["results"] == [
        {"id": team.pk, "name": "red", "description": "", "leads": ["ann"], "members": ["bob"]}
    ]


def test_any_signed_in_user_reads():
    team = TeamFactory(name="red")
    response = client_for(make_member(team)).get(f"/api/teams/{team.pk}/")
    assert response.status_code == 200
    assert response.json()["name"] == "red"


def test_create_and_patch(admin_client):
    UserFactory(username="ann")
    UserFactory(username="bob")
    response = admin_client.post(
        "/api/teams/", {"name": "red", "leads": ["ann"], "members": ["bob"]}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["leads"], body["members"]) == (["ann"], ["bob"])
    response = admin_client.patch(
        f"/api/teams/{body['id']}/", {"leads": ["ann", "bob"], "members": []}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["leads"] == ["ann", "bob"]
    entry = AuditEntry.objects.get(event_type=AuditEvent.MEMBERSHIP_CHANGED)
    assert entry.before == {"leads": ["ann"], "members": ["bob"]}
    assert entry.after == {"leads": ["ann", "bob"], "members": []}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({}, "name"),
        ({"name": "red"}, "name"),  # taken
        ({"name": "x", "leads": ["ghost"]}, "leads"),
        ({"name": "x", "members": ["ghost"]}, "members"),
        ({"name": "x", "members": "ann"}, "members"),
        ({"name": "x", "leads": ["ann"], "members": ["ann"]}, "members"),
    ],
)
def test_create_rules_are_400_naming_the_field(admin_client, body, field):
    TeamFactory(name="red")
    UserFactory(username="ann")
    response = admin_client.post("/api/teams/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert Team.objects.count() == 1


def _write(client: APIClient, kind: str, team: Team):
    if kind == "create":
        return client.post("/api/teams/", {"name": "new-team"}, format="json")
    return client.patch(f"/api/teams/{team.pk}/", {"name": "renamed"}, format="json")


@pytest.mark.parametrize("kind", ["create", "patch"])
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_permission_matrix(role, kind):
    team = TeamFactory(name="red")
    response = _write(client_for(make_role_user(role, team)), kind, team)
    if role == "admin":
        assert response.status_code in (200, 201), response.json()
    elif role == "anonymous":
        assert response.status_code in (401, 403)
    else:
        assert response.status_code == 403
        assert Team.objects.filter(name__in=["new-team", "renamed"]).count() == 0


def test_put_is_not_offered(admin_client):
    team = TeamFactory(name="red")
    assert (
        admin_client.put(f"/api/teams/{team.pk}/", {"name": "x"}, format="json").status_code == 405
    )


def test_filter_by_name(admin_client):
    TeamFactory(name="red")
    TeamFactory(name="blue")
    response = admin_client.get("/api/teams/?name=blue")
    assert [t["name"] for t in response.json()["results"]] == ["blue"]


def test_the_reason_goes_to_the_audit_entries(admin_client):
    UserFactory(username="ann")
    created = admin_client.post("/api/teams/", {"name": "red", "reason": "Q1 plan"}, format="json")
    assert created.status_code == 201
    team_id = created.json()["id"]
    assert "reason" not in created.json()
    changed = admin_client.patch(
        f"/api/teams/{team_id}/", {"leads": ["ann"], "reason": "Ann leads"}, format="json"
    )
    assert changed.status_code == 200
    reasons = dict(AuditEntry.objects.filter(team_id=team_id).values_list("event_type", "reason"))
    assert reasons == {
        AuditEvent.TEAM_CREATED: "Q1 plan",
        AuditEvent.MEMBERSHIP_CHANGED: "Ann leads",
    }
    too_long = admin_client.patch(f"/api/teams/{team_id}/", {"reason": "x" * 2001}, format="json")
    assert too_long.status_code == 400 and "reason" in too_long.json()
