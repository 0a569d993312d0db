"""``/api/certifications/`` and ``/api/workloads/{id}/template/`` (docs/workloads.md): the
life of a certification over the API, errors naming the field, a template built and a
job submitted by workload alone into a certified-only share."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.certification_world import G5, P4, make_cert_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_cert_world()


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


BENCHMARK = {
    "runtime": 1800,
    "converged": True,
    "utilization": "91.5",
    "failure_rate": "0.5",
    "output_valid": True,
    "environment": "train:2.4",
    "notes": "mAP matches the reference",
}


def test_propose_certify_reject_revoke_and_a_template_over_the_api(world):
    lead, reviewer = client_for(world.red_lead), client_for(world.reviewer)
    made = lead.post(
        "/api/certifications/",
        {"workload": world.workload.pk, "instance_type": P4, "count": 1, **BENCHMARK},
        format="json",
    )
    assert made.status_code == 201, made.json()
    first = made.json()
    assert first["state"] == "proposed" and first["configuration"] == "ml.p4d.24xlarge x1"
    second = lead.post(
        "/api/certifications/",
        {"workload": world.workload.pk, "instance_type": G5, "count": 2, **BENCHMARK},
        format="json",
    ).json()
    assert (
        lead.post(f"/api/certifications/{first['id']}/certify/", {"note": "x"}).status_code == 403
    )
    ok = reviewer.post(f"/api/certifications/{first['id']}/certify/", {"note": "good"})
    assert ok.status_code == 200 and ok.json()["status"] == "certified"
    assert ok.json()["drift"] == {"p50": None, "p90": None, "runs": 0, "drifting": False}
    no = reviewer.post(f"/api/certifications/{second['id']}/reject/", {"note": ""})
    assert no.status_code == 400 and "note" in no.json()
    reviewer.post(f"/api/certifications/{second['id']}/reject/", {"note": "no eval"})
    listed = lead.get(f"/api/certifications/?workload={world.workload.pk}&state=certified").json()
    assert [c["id"] for c in listed["results"]] == [first["id"]]

    bad = lead.post(
        f"/api/workloads/{world.workload.pk}/template/",
        {"entries": [{"certification": second["id"], "reason": "fallback"}]},
        format="json",
    )
    assert bad.status_code == 400 and "is rejected" in bad.json()["entries"][0]
    saved = lead.post(
        f"/api/workloads/{world.workload.pk}/template/",
        {"entries": [{"certification": first["id"], "reason": "fastest"}], "max_pending": 900},
        format="json",
    )
    assert saved.status_code == 200, saved.json()
    assert saved.json()["entries"][0]["configuration"] == "ml.p4d.24xlarge x1"

    world.red_share.certified_only = True
    world.red_share.save()
    member = client_for(world.red_member)
    job = member.post(
        "/api/jobs/",
        {"share": world.red_share.pk, "name": "by-workload", "workload": world.workload.pk},
        format="json",
    )
    assert job.status_code == 201, job.json()
    body = job.json()
    assert body["preferences"] == [{"instance_type": P4, "count": 1, "runtime": 1800}]
    assert body["template"]["entries"][0]["reason"] == "fastest" and body["max_pending"] == 900
    refused = member.post(
        "/api/jobs/",
        {
            "share": world.red_share.pk,
            "name": "odd",
            "workload": world.workload.pk,
            "preferences": [{"instance_type": P4, "count": 1}, {"instance_type": G5, "count": 2}],
        },
        format="json",
    )
    assert refused.status_code == 400
    assert refused.json()["preferences"] == [
        "preferences[1]: ml.g5.xlarge x2 is not certified for vision/detector-finetune."
    ]

    revoked = lead.post(f"/api/certifications/{first['id']}/revoke/", {"reason": "new image"})
    assert revoked.status_code == 200 and revoked.json()["revoke_reason"] == "new image"
    assert lead.get("/api/certifications/abc/").status_code == 404


def test_bad_input_is_a_400_naming_the_field_never_a_500(world):
    lead = client_for(world.red_lead)
    response = lead.post(
        "/api/certifications/",
        {"workload": world.workload.pk, "instance_type": "x" * 500, "count": 10**12, **BENCHMARK},
        format="json",
    )
    assert response.status_code == 400
    assert {"instance_type", "count"} <= set(response.json())
    template = lead.post(
        f"/api/workloads/{world.workload.pk}/template/",
        {"entries": "nope", "deadline_offset": 10**13},
        format="json",
    )
    assert template.status_code == 400
    assert lead.get("/api/workloads/999999/template/").status_code == 404


def test_the_list_reads_each_workloads_runs_once(world, django_assert_max_num_queries):
    from tests.certification_world import certified

    for count in range(1, 7):
        certified(world, count=count)
    reader = client_for(world.outsider)
    reader.get("/api/certifications/")  # warm the session and permission reads
    with django_assert_max_num_queries(12):
        body = reader.get("/api/certifications/").json()
    assert body["count"] == 6 and all(c["drift"]["runs"] == 0 for c in body["results"])
