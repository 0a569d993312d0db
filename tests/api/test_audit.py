"""Audit trail API: reviewers and admins only, filters, pagination, CSV and JSON downloads."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import AuditEvent
from governance.services import audit
from tests.factories import make_job, make_world

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
    world = make_world()
    now = timezone.now()
    world.job = make_job(world.red_share, world.red_member)
    world.t0 = now - timedelta(hours=2)
    world.e1 = audit.record(
        event_type=AuditEvent.TEAM_CREATED,
        actor=world.admin,
        subject=world.red,
        after={"name": "red"},
        team_id=world.red.pk,
        at=world.t0,
    )
    world.e2 = audit.record(
        event_type=AuditEvent.JOB_SUBMITTED,
        actor=world.red_member,
        subject=world.job,
        after={"priority": 1},
        reason='quote "and", comma',
        team_id=world.red.pk,
        share_id=world.red_share.pk,
        job_id=world.job.pk,
        queue_id=world.queue.pk,
        at=now - timedelta(hours=1),
    )
    world.e3 = audit.record(
        event_type=AuditEvent.SHARE_UPDATED,
        actor=None,
        subject=world.blue_share,
        before={"limits": {"ml.g5.xlarge": 1}},
        after={"limits": {"ml.g5.xlarge": 2}},
        team_id=world.blue.pk,
        share_id=world.blue_share.pk,
        at=now,
    )
    return world


def client_for(w: Any, role: str) -> APIClient:
    client = APIClient()
    if ROLES[role] is not None:
        client.force_authenticate(getattr(w, ROLES[role]))
    return client


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {403}),
        ("lead_own", {403}),
        ("lead_other", {403}),
        ("reviewer", {200}),
        ("admin", {200}),
    ],
)
@pytest.mark.parametrize("fmt", ["", "?format=csv", "?format=json"])
def test_read_permissions(w: Any, role: str, expected: set[int], fmt: str) -> None:
    assert client_for(w, role).get(f"/api/audit/{fmt}").status_code in expected


@pytest.mark.parametrize("method", ["post", "patch", "put", "delete"])
def test_read_only(w: Any, method: str) -> None:
    response = getattr(client_for(w, "admin"), method)("/api/audit/", {}, format="json")
    assert response.status_code == 405


def test_fields_and_newest_first(w: Any) -> None:
    data = client_for(w, "reviewer").get("/api/audit/").json()
    assert data["count"] == 3
    assert [e["id"] for e in data["results"]] == [w.e3.pk, w.e2.pk, w.e1.pk]
    entry = data["results"][1]
    assert entry == {
        "id": w.e2.pk,
        "event_type": "job.submitted",
        "actor": "red_member",
        "subject_type": "job",
        "subject_id": str(w.job.pk),
        "subject_repr": str(w.job),
        "team": w.red.pk,
        "share": w.red_share.pk,
        "job": w.job.pk,
        "queue": w.queue.pk,
        "before": None,
        "after": {"priority": 1},
        "reason": 'quote "and", comma',
        "created_at": entry["created_at"],
    }
    assert data["results"][0]["actor"] is None


def test_pagination(w: Any) -> None:
    data = client_for(w, "admin").get("/api/audit/?limit=1&offset=1").json()
    assert [e["id"] for e in data["results"]] == [w.e2.pk]
    assert data["next"] and data["previous"]


def test_filters(w: Any) -> None:
    client = client_for(w, "admin")

    def ids(query: str) -> list[int]:
        response = client.get(f"/api/audit/?{query}")
        assert response.status_code == 200, response.json()
        return [e["id"] for e in response.json()["results"]]

    assert ids("actor=red_member") == [w.e2.pk]
    assert ids(f"actor={w.admin.pk}") == [w.e1.pk]
    assert ids("event_type=share.updated") == [w.e3.pk]
    assert ids(f"team={w.red.pk}") == [w.e2.pk, w.e1.pk]
    assert ids(f"share={w.blue_share.pk}") == [w.e3.pk]
    assert ids(f"job={w.job.pk}") == [w.e2.pk]
    since = (w.t0 + timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    assert ids(f"since={since}") == [w.e3.pk, w.e2.pk]
    assert ids(f"until={since}") == [w.e1.pk]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("since=yesterday", "since"),
        ("until=2024-13-01", "until"),
        ("event_type=nope", "event_type"),
    ],
)
def test_invalid_filter_400_names_field(w: Any, query: str, field: str) -> None:
    response = client_for(w, "admin").get(f"/api/audit/?{query}")
    assert response.status_code == 400
    assert field in response.json()


def _content(response: Any) -> str:
    return b"".join(response.streaming_content).decode()


def test_csv_streams_every_filtered_row(w: Any) -> None:
    response = client_for(w, "reviewer").get(f"/api/audit/?format=csv&limit=1&team={w.red.pk}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(_content(response))))
    assert [int(r["id"]) for r in rows] == [w.e2.pk, w.e1.pk]  # all rows, not one page
    assert rows[0]["reason"] == 'quote "and", comma'
    assert json.loads(rows[0]["after"]) == {"priority": 1}
    assert rows[0]["actor"] == "red_member"
    assert list(rows[0]) == [
        "id", "event_type", "actor", "subject_type", "subject_id", "subject_repr", "team",
        "team_name", "share", "share_name", "job", "queue", "queue_name", "before", "after",
        "reason", "created_at",
    ]  # fmt: skip
    assert rows[0]["team"] == str(w.red.pk) and rows[0]["team_name"] == w.red.name


def test_csv_by_accept_header(w: Any) -> None:
    response = client_for(w, "admin").get("/api/audit/", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    assert len(list(csv.DictReader(io.StringIO(_content(response))))) == 3


def test_json_download_is_full_array(w: Any) -> None:
    response = client_for(w, "admin").get("/api/audit/?format=json&limit=1")
    assert response.status_code == 200
    assert "attachment" in response["Content-Disposition"]
    data = json.loads(_content(response))
    assert [e["id"] for e in data] == [w.e3.pk, w.e2.pk, w.e1.pk]
    assert data[0]["before"] == {"limits": {"ml.g5.xlarge": 1}}


def test_csv_invalid_filter_still_400(w: Any) -> None:
    response = client_for(w, "admin").get("/api/audit/?format=csv&since=bad")
    assert response.status_code == 400


def test_service_writes_show_up(w: Any) -> None:
    response = client_for(w, "member").post(
        "/api/jobs/",
        {
            "share": w.red_share.pk,
            "name": "x",
            "preferences": [{"instance_type": "ml.g5.xlarge", "count": 1}],
        },
        format="json",
    )
    assert response.status_code == 201
    data = client_for(w, "admin").get(f"/api/audit/?job={response.json()['id']}").json()
    assert [e["event_type"] for e in data["results"]] == ["job.submitted"]


def test_csv_cells_that_a_spreadsheet_would_run_are_written_as_text(w: Any) -> None:
    """A member writes a formula as a reason; the reviewer's export opens it as text."""
    for name in ('=HYPERLINK("http://x","y")', "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx"):
        audit.record(
            event_type=AuditEvent.JOB_SUBMITTED,
            actor=w.red_member,
            subject=w.job,
            reason=name,
            team_id=w.red.pk,
        )
    rows = list(csv.DictReader(io.StringIO(_content(client_for(w, "reviewer").get(
        "/api/audit/?format=csv&event_type=job.submitted"
    )))))  # fmt: skip
    reasons = [r["reason"] for r in rows if r["reason"] != 'quote "and", comma']
    assert len(reasons) == 6
    assert all(reason.startswith("'") for reason in reasons)
    assert '\'=HYPERLINK("http://x","y")' in reasons
    assert all(r["id"].isdigit() for r in rows)  # numbers stay numbers
