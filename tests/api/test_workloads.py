"""``/api/workloads/`` (docs/workloads.md): list and filter, create, PATCH, errors naming
the field; jobs naming a workload."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from governance.models import Workload
from tests.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_world()


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_lead_creates_lists_filters_and_patches(world):
    lead = client_for(world.red_lead)
    response = lead.post(
        "/api/workloads/",
        {"team": world.red.pk, "name": "vision/detector-finetune", "interruption": "tolerant"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["recovery_status"] == "unverified"
    assert body["history"] == []
    client_for(world.blue_lead).post(
        "/api/workloads/", {"team": world.blue.pk, "name": "nlp/pretrain"}, format="json"
    )
    listed = client_for(world.outsider).get(f"/api/workloads/?team={world.red.pk}").json()
    assert [w["name"] for w in listed["results"]] == ["vision/detector-finetune"]
    patched = lead.patch(
        f"/api/workloads/{body['id']}/", {"interruption": "protected"}, format="json"
    )
    assert patched.status_code == 200
    assert patched.json()["interruption"] == "protected"


def test_errors_name_the_field(world):
    lead = client_for(world.red_lead)
    response = lead.post(
        "/api/workloads/",
        {"team": world.red.pk, "name": "bad name", "interruption": "never"},
        format="json",
    )
    assert response.status_code == 400
    assert {"name", "interruption"} <= set(response.json())
    workload = Workload.objects.create(team=world.red, name="a")
    response = lead.patch(
        f"/api/workloads/{workload.pk}/", {"recovery_status": "verified"}, format="json"
    )
    assert response.status_code == 400
    assert "recovery_status" in response.json()
    response = client_for(world.red_member).patch(
        f"/api/workloads/{workload.pk}/", {"name": "b"}, format="json"
    )
    assert response.status_code == 403


def test_a_job_of_another_teams_workload_is_a_400_on_workload(world):
    theirs = Workload.objects.create(team=world.blue, name="nlp/pretrain")
    mine = Workload.objects.create(team=world.red, name="vision/x")
    member = client_for(world.red_member)
    job = {
        "share": world.red_share.pk,
        "name": "j",
        "preferences": [{"instance_type": "ml.g5.xlarge", "count": 1}],
    }
    response = member.post("/api/jobs/", {**job, "workload": theirs.pk}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["workload"]
    response = member.post("/api/jobs/", {**job, "workload": mine.pk}, format="json")
    assert response.status_code == 201
    assert response.json()["workload"] == mine.pk
    listed = member.get(f"/api/jobs/?workload={mine.pk}").json()
    assert [j["id"] for j in listed["results"]] == [response.json()["id"]]
