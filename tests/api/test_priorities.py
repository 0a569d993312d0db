"""``/api/priority-definitions/`` through the API."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from governance.models import AuditEntry, PriorityDefinition
from tests.factories import ROLE_NAMES, TeamFactory, UserFactory, make_admin, make_role_user

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def admin_client():
    return client_for(make_admin())


def test_create_list_patch_delete(admin_client):
    UserFactory(username="owner")
    response = admin_client.post(
        "/api/priority-definitions/",
        {
            "name": "urgent",
            "min_priority": 500,
            "max_priority": 999,
            "criteria": "release decision blocked",
            "usable_by": ["admin"],
            "exception_owner": "owner",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body == {
        "id": body["id"],
        "name": "urgent",
        "min_priority": 500,
        "max_priority": 999,
        "criteria": "release decision blocked",
        "usable_by": ["admin"],
        "exception_owner": "owner",
    }
    url = f"/api/priority-definitions/{body['id']}/"
    response = admin_client.patch(url, {"usable_by": ["lead", "admin"]}, format="json")
    assert response.status_code == 200
    assert response.json()["usable_by"] == ["lead", "admin"]
    assert admin_client.get("/api/priority-definitions/").json()["count"] == 1
    assert admin_client.delete(url).status_code == 204
    assert not PriorityDefinition.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"min_priority": -1}, "min_priority"),
        ({"max_priority": 10000}, "max_priority"),
        ({"min_priority": 50, "max_priority": 10}, "max_priority"),
        ({"min_priority": 90, "max_priority": 150}, "min_priority"),
        ({"min_priority": 90, "max_priority": 150}, "max_priority"),
        ({"usable_by": ["boss"]}, "usable_by"),
        ({"exception_owner": "ghost"}, "exception_owner"),
        ({"name": "normal"}, "name"),
        ({"min_priority": "high"}, "min_priority"),
    ],
)
def test_rules_are_400_naming_the_field(admin_client, body, field):
    PriorityDefinition.objects.create(name="normal", min_priority=100, max_priority=199)
    payload = {"name": "new", "min_priority": 0, "max_priority": 10}
    payload.update(body)
    response = admin_client.post("/api/priority-definitions/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert PriorityDefinition.objects.count() == 1


def test_overlap_message_names_the_band(admin_client):
    PriorityDefinition.objects.create(name="normal", min_priority=100, max_priority=199)
    response = admin_client.post(
        "/api/priority-definitions/",
        {"name": "x", "min_priority": 150, "max_priority": 300},
        format="json",
    )
    assert "normal (100-199)" in response.json()["min_priority"][0].replace("'", "")


def _write(client: APIClient, kind: str, definition: PriorityDefinition):
    url = f"/api/priority-definitions/{definition.pk}/"
    if kind == "create":
        return client.post(
            "/api/priority-definitions/",
            {"name": "new", "min_priority": 10, "max_priority": 20},
            format="json",
        )
    if kind == "patch":
        return client.patch(url, {"criteria": "changed"}, format="json")
    return client.delete(url)


@pytest.mark.parametrize("kind", ["create", "patch", "delete"])
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_permission_matrix(role, kind):
    definition = PriorityDefinition.objects.create(name="low", min_priority=0, max_priority=9)
    response = _write(client_for(make_role_user(role, TeamFactory(name="red"))), kind, definition)
    if role == "admin":
        assert response.status_code in (200, 201, 204)
        return
    assert response.status_code in ((401, 403) if role == "anonymous" else (403,))
    assert list(PriorityDefinition.objects.values_list("name", "criteria")) == [("low", "")]
    assert not AuditEntry.objects.exists()
