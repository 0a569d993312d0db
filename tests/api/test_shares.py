"""``/api/shares/`` through the API: rules, versions (409), delete, and who may write."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, JobState, Share
from tests.factories import (
    ROLE_NAMES,
    TeamFactory,
    make_admin,
    make_job,
    make_queue,
    make_role_user,
    make_share,
)

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def admin():
    return make_admin()


@pytest.fixture
def admin_client(admin):
    return client_for(admin)


@pytest.fixture
def queue():
    return make_queue("main", {"ml.g5.xlarge": 4, "ml.p4d.24xlarge": 2})


@pytest.fixture
def team():
    return TeamFactory(name="red")


def test_create_and_read(admin_client, queue, team):
    response = admin_client.post(
        "/api/shares/",
        {
            "queue": queue.pk,
            "team": team.pk,
            "name": "red",
            "policy": "LEND_AND_BORROW",
            "limits": {"ml.g5.xlarge": 2},
            "reason": "setup",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body == {
        "id": body["id"],
        "queue": queue.pk,
        "queue_name": "main",
        "team": team.pk,
        "team_name": "red",
        "name": "red",
        "policy": "LEND_AND_BORROW",
        "borrow_limit": -1,
        "limits": {"ml.g5.xlarge": 2},
        "in_share_preemption": False,
        "preemption_retries": None,
        "enabled": True,
        "borrow_requires_verified_recovery": False,
        "certified_only": False,
        "version": 1,
    }
    assert AuditEntry.objects.get(event_type=AuditEvent.SHARE_CREATED).reason == "setup"
    listed = admin_client.get(f"/api/shares/?queue={queue.pk}").json()["results"]
    assert [s["name"] for s in listed] == ["red"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "taken"}, "name"),
        ({"limits": {}}, "limits"),
        ({"limits": {"ml.m5.large": 1}}, "limits"),
        ({"limits": {"ml.g5.xlarge": -1}}, "limits"),
        ({"policy": "RESERVE", "borrow_limit": 5}, "borrow_limit"),
        ({"policy": "LEND_AND_BORROW", "borrow_limit": -3}, "borrow_limit"),
        ({"policy": "GREEDY"}, "policy"),
        ({"preemption_retries": -1}, "preemption_retries"),
        ({"queue": 999999}, "queue"),
        ({"team": 999999}, "team"),
    ],
)
def test_create_rules_are_400_naming_the_field(admin_client, queue, team, body, field):
    make_share(queue, team, "taken")
    payload = {"queue": queue.pk, "team": team.pk, "name": "new", "limits": {"ml.g5.xlarge": 1}}
    payload.update(body)
    response = admin_client.post("/api/shares/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert Share.objects.count() == 1


def test_limit_for_type_without_capacity_names_the_type(admin_client, queue, team):
    response = admin_client.post(
        "/api/shares/",
        {"queue": queue.pk, "team": team.pk, "name": "x", "limits": {"ml.m5.large": 1}},
        format="json",
    )
    assert "ml.m5.large" in response.json()["limits"][0]


def test_twenty_first_share_names_queue(admin_client, queue, team):
    for i in range(20):
        make_share(queue, team, f"s{i}")
    response = admin_client.post(
        "/api/shares/",
        {"queue": queue.pk, "team": team.pk, "name": "x", "limits": {"ml.g5.xlarge": 1}},
        format="json",
    )
    assert response.status_code == 400
    assert "queue" in response.json()


def test_patch_with_version_then_stale_patch_is_409(admin_client, queue, team):
    share = make_share(queue, team, "red")
    url = f"/api/shares/{share.pk}/"
    response = admin_client.patch(
        url, {"version": 1, "limits": {"ml.g5.xlarge": 3}, "reason": "q3"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["version"] == 2
    assert AuditEntry.objects.get(event_type=AuditEvent.SHARE_UPDATED).reason == "q3"
    stale = admin_client.patch(url, {"version": 1, "enabled": False}, format="json")
    assert stale.status_code == 409
    body = stale.json()
    assert "version" in body
    assert body["current"]["version"] == 2
    assert body["current"]["limits"] == {"ml.g5.xlarge": 3}
    share.refresh_from_db()
    assert share.enabled is True and share.version == 2


def test_patch_without_version_is_400(admin_client, queue, team):
    share = make_share(queue, team, "red")
    response = admin_client.patch(f"/api/shares/{share.pk}/", {"enabled": False}, format="json")
    assert response.status_code == 400
    assert "version" in response.json()


def test_patch_policy_away_clears_borrow_limit(admin_client, queue, team):
    share = make_share(queue, team, "red", policy="LEND_AND_BORROW", borrow_limit=100)
    response = admin_client.patch(
        f"/api/shares/{share.pk}/", {"version": 1, "policy": "LEND"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["borrow_limit"] is None


def test_delete(admin_client, admin, queue, team):
    unused = make_share(queue, team, "unused")
    assert admin_client.delete(f"/api/shares/{unused.pk}/?reason=gone").status_code == 204
    assert AuditEntry.objects.get(event_type=AuditEvent.SHARE_DELETED).reason == "gone"
    used = make_share(queue, team, "used")
    make_job(used, admin, state=JobState.RUNNING)
    response = admin_client.delete(f"/api/shares/{used.pk}/")
    assert response.status_code == 400
    assert "disable" in response.json()["share"][0].lower()
    assert Share.objects.filter(pk=used.pk).exists()


def _write(client: APIClient, kind: str, share: Share):
    if kind == "create":
        return client.post(
            "/api/shares/",
            {
                "queue": share.queue_id,
                "team": share.team_id,
                "name": "new",
                "limits": {"ml.g5.xlarge": 1},
            },
            format="json",
        )
    if kind == "patch":
        return client.patch(
            f"/api/shares/{share.pk}/", {"version": 1, "enabled": False}, format="json"
        )
    return client.delete(f"/api/shares/{share.pk}/")


@pytest.mark.parametrize("kind", ["create", "patch", "delete"])
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_permission_matrix(role, kind, queue, team):
    share = make_share(queue, team, "red")
    response = _write(client_for(make_role_user(role, team)), kind, share)
    if role == "admin":
        assert response.status_code in (200, 201, 204)
        return
    assert response.status_code in ((401, 403) if role == "anonymous" else (403,))
    assert list(Share.objects.values_list("name", "enabled", "version")) == [("red", True, 1)]
    assert not AuditEntry.objects.exists()
