"""``/api/plans/``: fields, filters, the permission matrix, audit entries, field errors;
and ``/api/jobs/`` preferences naming a plan."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, CapacityPlan, Job
from tests.factories import ROLE_NAMES, make_role_user, make_world

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def world():
    return make_world()


def body(world, **fields):
    now = timezone.now()
    values = {
        "queue": world.queue.pk,
        "share": world.red_share.pk,
        "name": "red-december",
        "instance_type": "ml.p4d.24xlarge",
        "count": 2,
        "start": (now - timedelta(hours=1)).isoformat(),
        "end": (now + timedelta(days=7)).isoformat(),
        "hourly_price": 20.5,
        "reason": "bought for the release",
    }
    values.update(fields)
    return values


def test_create_read_resize_end(world):
    admin = client_for(world.admin)
    response = admin.post("/api/plans/", body(world), format="json")
    assert response.status_code == 201, response.json()
    created = response.json()
    assert {k: created[k] for k in ("queue", "share", "name", "instance_type", "count")} == {
        "queue": world.queue.pk,
        "share": world.red_share.pk,
        "name": "red-december",
        "instance_type": "ml.p4d.24xlarge",
        "count": 2,
    }
    assert created["hourly_price"] == 20.5
    assert created["state"] == "active"
    assert created["usage"] == 0
    assert {"id", "start", "end"} <= set(created)
    plan_id = created["id"]

    reader = client_for(world.red_member)
    assert reader.get(f"/api/plans/{plan_id}/").json()["name"] == "red-december"

    response = admin.patch(f"/api/plans/{plan_id}/", {"count": 3}, format="json")
    assert response.status_code == 400
    assert "reason" in response.json()
    response = admin.patch(
        f"/api/plans/{plan_id}/", {"count": 3, "reason": "one more"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["count"] == 3

    response = admin.post(f"/api/plans/{plan_id}/end/", {"reason": "done early"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["state"] == "ended"
    assert response.json()["ended_at"] is not None
    events = list(
        AuditEntry.objects.filter(subject_type="capacityplan")
        .order_by("id")
        .values_list("event_type", "reason")
    )
    assert events == [
        (AuditEvent.PLAN_CREATED, "bought for the release"),
        (AuditEvent.PLAN_RESIZED, "one more"),
        (AuditEvent.PLAN_ENDED, "done early"),
    ]
    response = admin.post(f"/api/plans/{plan_id}/end/", {"reason": "again"}, format="json")
    assert response.status_code == 400
    assert "end" in response.json()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": ""}, "name"),
        ({"count": -1}, "count"),
        ({"count": "lots"}, "count"),
        ({"count": 10**12}, "count"),
        ({"instance_type": "ml.nope"}, "instance_type"),
        ({"queue": 10**20}, "queue"),
        ({"share": "x"}, "share"),
        ({"start": "soon"}, "start"),
        ({"end": "1999-01-01T00:00:00Z"}, "end"),
        ({"hourly_price": -2}, "hourly_price"),
    ],
)
def test_create_errors_name_the_field(world, fields, field):
    response = client_for(world.admin).post("/api/plans/", body(world, **fields), format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not CapacityPlan.objects.exists()


def test_patch_other_fields_refused(world):
    admin = client_for(world.admin)
    plan_id = admin.post("/api/plans/", body(world), format="json").json()["id"]
    response = admin.patch(f"/api/plans/{plan_id}/", {"name": "x"}, format="json")
    assert response.status_code == 400


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_permission_matrix(world, role):
    """Everyone signed in reads; only admins create, resize and end."""
    user = make_role_user(role, world.red)
    client = client_for(user)
    plan_id = client_for(world.admin).post("/api/plans/", body(world), format="json").json()["id"]
    expected_read = 401 if role == "anonymous" else 200
    expected_write = {"anonymous": 401, "admin": None}.get(role, 403)
    assert client.get("/api/plans/").status_code in (expected_read, 403)
    if role == "anonymous":
        assert client.get("/api/plans/").status_code in (401, 403)
    else:
        assert client.get(f"/api/plans/{plan_id}/").status_code == 200
    create = client.post("/api/plans/", body(world, name="another"), format="json")
    resize = client.patch(f"/api/plans/{plan_id}/", {"count": 5, "reason": "r"}, format="json")
    end = client.post(f"/api/plans/{plan_id}/end/", {"reason": "r"}, format="json")
    if expected_write is None:
        assert (create.status_code, resize.status_code, end.status_code) == (201, 200, 200)
    else:
        codes = {create.status_code, resize.status_code, end.status_code}
        assert codes <= {401, 403}, codes
        assert CapacityPlan.objects.count() == 1
        assert CapacityPlan.objects.get().count == 2


def test_filters(world):
    admin = client_for(world.admin)
    now = timezone.now()
    admin.post("/api/plans/", body(world), format="json")
    admin.post(
        "/api/plans/",
        body(
            world,
            name="blue-next",
            share=world.blue_share.pk,
            instance_type="ml.g5.xlarge",
            start=(now + timedelta(days=1)).isoformat(),
            end=(now + timedelta(days=2)).isoformat(),
        ),
        format="json",
    )

    def names(query: str) -> list[str]:
        data = admin.get(f"/api/plans/?{query}").json()
        rows = data["results"] if isinstance(data, dict) else data
        return [row["name"] for row in rows]

    assert names("") == ["red-december", "blue-next"]
    assert names(f"share={world.blue_share.pk}") == ["blue-next"]
    assert names(f"team={world.red.pk}") == ["red-december"]
    assert names("state=active") == ["red-december"]
    assert names("state=upcoming") == ["blue-next"]
    assert names("state=ended") == []
    assert names("instance_type=ml.g5.xlarge") == ["blue-next"]
    assert names(f"queue={world.queue.pk}") == ["red-december", "blue-next"]


def test_job_api_accepts_a_plan_preference(world):
    client_for(world.admin).post("/api/plans/", body(world), format="json")
    lead = client_for(world.red_lead)
    response = lead.post(
        "/api/jobs/",
        {
            "share": world.red_share.pk,
            "name": "train",
            "kind": "training",
            "preferences": [
                {"plan": "red-december", "count": 1},
                {"instance_type": "ml.p4d.24xlarge", "count": 1},
            ],
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["preferences"][0] == {"plan": "red-december", "count": 1}
    response = lead.post(
        "/api/jobs/",
        {
            "share": world.red_share.pk,
            "name": "etl",
            "kind": "processing",
            "preferences": [{"plan": "red-december", "count": 1}],
        },
        format="json",
    )
    assert response.status_code == 400
    assert "preferences[0].plan" in response.json()["preferences"][0]
    assert Job.objects.count() == 1


def test_usage_api_shows_plans_apart(world):
    admin = client_for(world.admin)
    admin.post("/api/plans/", body(world), format="json")
    data = admin.get(f"/api/queues/{world.queue.pk}/usage/").json()
    assert [(p["name"], p["count"], p["usage"], p["state"]) for p in data["plans"]] == [
        ("red-december", 2, 0, "active")
    ]
    capacity = {t["instance_type"]: t["capacity"] for t in data["types"]}
    assert capacity["ml.p4d.24xlarge"] == 2  # on-demand capacity, the plan apart


def test_jobs_filter_by_plan(world):
    from governance.models import CapacityPlan, JobState

    client_for(world.admin).post("/api/plans/", body(world), format="json")
    plan = CapacityPlan.objects.get()
    lead = client_for(world.red_lead)
    ids = []
    for name in ("on-plan", "on-demand"):
        ids.append(
            lead.post(
                "/api/jobs/",
                {
                    "share": world.red_share.pk,
                    "name": name,
                    "preferences": [{"plan": "red-december", "count": 1}],
                },
                format="json",
            ).json()["id"]
        )
    Job.objects.filter(pk=ids[0]).update(
        state=JobState.RUNNING, plan=plan, instance_type=plan.instance_type, preference=0
    )
    data = lead.get(f"/api/jobs/?plan={plan.pk}").json()
    rows = data["results"] if isinstance(data, dict) else data
    assert [(r["name"], r["plan"]) for r in rows] == [("on-plan", "red-december")]
