"""``/api/instance-types/`` and ``/api/queues/`` (with usage) through the API."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, InstanceType, JobQueue, JobState
from tests.factories import (
    ROLE_NAMES,
    InstanceTypeFactory,
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


def test_instance_type_create_defaults_and_lookup_by_name(admin_client):
    response = admin_client.post(
        "/api/instance-types/", {"name": "ml.g5.xlarge", "accelerators": 1}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["accelerated"] is True
    response = admin_client.post("/api/instance-types/", {"name": "ml.m5.large"}, format="json")
    assert response.json()["accelerated"] is False
    response = admin_client.get("/api/instance-types/ml.g5.xlarge/")
    assert response.status_code == 200
    assert response.json() == {
        "id": InstanceType.objects.get(name="ml.g5.xlarge").pk,
        "name": "ml.g5.xlarge",
        "accelerated": True,
        "accelerators": 1,
        "speed": 1.0,
        "hourly_price": 0.0,
    }
    response = admin_client.patch(
        "/api/instance-types/ml.g5.xlarge/", {"hourly_price": "1.41", "speed": 1.2}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["hourly_price"] == 1.41
    assert admin_client.get("/api/instance-types/ml.nope/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "ml.g5.xlarge"}, "name"),  # exists
        ({"name": "x", "accelerators": -1}, "accelerators"),
        ({"name": "x", "speed": 0}, "speed"),
        ({"name": "x", "hourly_price": -0.5}, "hourly_price"),
        ({"name": "x", "speed": "fast"}, "speed"),
    ],
)
def test_instance_type_rules(admin_client, body, field):
    InstanceTypeFactory(name="ml.g5.xlarge")
    response = admin_client.post("/api/instance-types/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert InstanceType.objects.count() == 1


def test_instance_type_rename_refused(admin_client):
    InstanceTypeFactory(name="ml.g5.xlarge")
    response = admin_client.patch(
        "/api/instance-types/ml.g5.xlarge/", {"name": "ml.g6.xlarge"}, format="json"
    )
    assert response.status_code == 400
    assert "name" in response.json()


def test_queue_create_and_capacity_patch(admin_client):
    InstanceTypeFactory(name="ml.g5.xlarge")
    InstanceTypeFactory(name="ml.p4d.24xlarge")
    response = admin_client.post(
        "/api/queues/",
        {"name": "main", "executor": "agent", "capacity": {"ml.g5.xlarge": 4}},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["capacity"] == {"ml.g5.xlarge": 4}
    assert body["executor"] == "agent"
    response = admin_client.patch(
        f"/api/queues/{body['id']}/",
        {"capacity": {"ml.g5.xlarge": 2, "ml.p4d.24xlarge": 1}, "reason": "shortage"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["capacity"] == {"ml.g5.xlarge": 2, "ml.p4d.24xlarge": 1}
    entry = AuditEntry.objects.get(event_type=AuditEvent.CAPACITY_CHANGED)
    assert entry.before == {"capacity": {"ml.g5.xlarge": 4}}
    assert entry.reason == "shortage"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "q", "executor": "cloud"}, "executor"),
        ({"name": "q", "capacity": {"ml.nope": 1}}, "capacity"),
        ({"name": "q", "capacity": {"ml.g5.xlarge": -1}}, "capacity"),
        ({"name": "q", "capacity": {"ml.g5.xlarge": "two"}}, "capacity"),
    ],
)
def test_queue_rules(admin_client, body, field):
    InstanceTypeFactory(name="ml.g5.xlarge")
    response = admin_client.post("/api/queues/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not JobQueue.objects.exists()


def test_removing_limited_type_names_capacity_and_share(admin_client):
    queue = make_queue("main", {"ml.g5.xlarge": 4, "ml.p4d.24xlarge": 2})
    make_share(queue, TeamFactory(name="red"), "red-share", {"ml.p4d.24xlarge": 1})
    response = admin_client.patch(
        f"/api/queues/{queue.pk}/", {"capacity": {"ml.g5.xlarge": 4}}, format="json"
    )
    assert response.status_code == 400
    assert "red-share" in response.json()["capacity"][0]


def test_usage_endpoint(admin_client, admin):
    queue = make_queue("main", {"ml.g5.xlarge": 4})
    share = make_share(
        queue,
        TeamFactory(name="red"),
        "red",
        {"ml.g5.xlarge": 1},
        policy="LEND_AND_BORROW",
        borrow_limit=-1,
    )
    make_share(queue, TeamFactory(name="blue"), "blue", {"ml.g5.xlarge": 3}, policy="LEND")
    make_job(
        share,
        admin,
        state=JobState.RUNNING,
        instance_type=InstanceType.objects.get(),
        preference=0,
        preferences=[{"instance_type": "ml.g5.xlarge", "count": 2}],
    )
    response = client_for(make_role_user("member", TeamFactory(name="red"))).get(
        f"/api/queues/{queue.pk}/usage/"
    )
    assert response.status_code == 200
    shares = {s["name"]: s["types"][0] for s in response.json()["shares"]}
    assert shares["red"] | {"instance_type": None} == {
        "instance_type": None,
        "limit": 1,
        "usage": 2,
        "own": 1,
        "borrowed": 1,
        "lent": 0,
        "idle": 0,
        "pending": 0,
    }
    assert shares["blue"]["lent"] == 1
    assert shares["blue"]["idle"] == 3


def _write(client: APIClient, target: str, queue: JobQueue):
    if target == "type-create":
        return client.post("/api/instance-types/", {"name": "ml.m5.large"}, format="json")
    if target == "type-patch":
        return client.patch("/api/instance-types/ml.g5.xlarge/", {"speed": 2.0}, format="json")
    if target == "queue-create":
        return client.post("/api/queues/", {"name": "new-queue"}, format="json")
    return client.patch(
        f"/api/queues/{queue.pk}/", {"capacity": {"ml.g5.xlarge": 9}}, format="json"
    )


@pytest.mark.parametrize("target", ["type-create", "type-patch", "queue-create", "queue-patch"])
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_permission_matrix(role, target):
    queue = make_queue("main", {"ml.g5.xlarge": 3})
    team = TeamFactory(name="red")
    response = _write(client_for(make_role_user(role, team)), target, queue)
    if role == "admin":
        assert response.status_code in (200, 201), response.json()
        return
    assert response.status_code == (403 if role != "anonymous" else response.status_code)
    assert response.status_code in (401, 403)
    assert not AuditEntry.objects.exists()
    assert InstanceType.objects.get().speed == 1.0


def test_types_and_new_queues_take_a_reason_for_the_audit_trail(admin_client):
    created = admin_client.post(
        "/api/instance-types/", {"name": "ml.g6.xlarge", "reason": "New GPUs"}, format="json"
    )
    assert created.status_code == 201, created.json()
    changed = admin_client.patch(
        "/api/instance-types/ml.g6.xlarge/", {"speed": 1.5, "reason": "Benchmarked"}, format="json"
    )
    assert changed.status_code == 200, changed.json()
    queue = admin_client.post(
        "/api/queues/",
        {"name": "batch", "capacity": {"ml.g6.xlarge": 2}, "reason": "Cluster online"},
        format="json",
    )
    assert queue.status_code == 201, queue.json()
    reasons = dict(
        AuditEntry.objects.filter(
            event_type__in=(
                AuditEvent.INSTANCE_TYPE_CREATED,
                AuditEvent.INSTANCE_TYPE_UPDATED,
                AuditEvent.QUEUE_CREATED,
            )
        ).values_list("event_type", "reason")
    )
    assert reasons == {
        AuditEvent.INSTANCE_TYPE_CREATED: "New GPUs",
        AuditEvent.INSTANCE_TYPE_UPDATED: "Benchmarked",
        AuditEvent.QUEUE_CREATED: "Cluster online",
    }
