"""Priority exceptions API: filing rules' 400s, decisions, the permission matrix."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import ExceptionState
from governance.models import PriorityException as PE
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
    world.job = make_job(world.red_share, world.red_member, priority=10)
    return world


def client_for(w: Any, role: str) -> APIClient:
    client = APIClient()
    if ROLES[role] is not None:
        client.force_authenticate(getattr(w, ROLES[role]))
    return client


def body(w: Any, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "team": w.red.pk,
        "job": w.job.pk,
        "priority": 2000,
        "justification": "Release blocked.",
        "expires_at": (timezone.now() + timedelta(days=2)).isoformat(),
    }
    data.update(fields)
    return {k: v for k, v in data.items() if v is not ...}


def pending(w: Any, **fields: Any) -> PE:
    fields.setdefault("job", w.job)
    return PE.objects.create(
        requester=w.red_lead,
        team=w.red,
        priority=2000,
        justification="Release blocked.",
        expires_at=timezone.now() + timedelta(days=2),
        **fields,
    )


def test_file_and_read(w: Any) -> None:
    client = client_for(w, "lead_own")
    response = client.post(
        "/api/exceptions/",
        body(w, wanted_by=(timezone.now() + timedelta(hours=5)).isoformat()),
        format="json",
    )
    assert response.status_code == 201, response.json()
    data = response.json()
    assert set(data) >= {
        "id", "team", "job", "share", "priority", "justification", "wanted_by",
        "expires_at", "state", "requester", "decided_by", "decided_at", "decision_note",
    }  # fmt: skip
    assert (data["state"], data["requester"], data["decided_by"]) == ("pending", "red_lead", None)
    assert client.get(f"/api/exceptions/{data['id']}/").json()["id"] == data["id"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"job": ..., "share": None}, "job"),
        ({"share": "SHARE"}, "share"),  # both job and share
        ({"priority": 10000}, "priority"),
        ({"priority": 300}, "priority"),  # the lead may already use it
        ({"justification": ""}, "justification"),
        ({"expires_at": "PAST"}, "expires_at"),
        ({"expires_at": "FAR"}, "expires_at"),
        ({"expires_at": "not a date"}, "expires_at"),
        ({"job": "BLUE_JOB"}, "team"),
    ],
)
def test_file_rule_400_names_field(w: Any, fields: dict[str, Any], field: str) -> None:
    values = {
        "SHARE": w.red_share.pk,
        "PAST": (timezone.now() - timedelta(minutes=1)).isoformat(),
        "FAR": (timezone.now() + timedelta(days=31)).isoformat(),
        "BLUE_JOB": make_job(w.blue_share, w.blue_lead).pk,
    }
    fields = {k: values.get(v, v) if isinstance(v, str) else v for k, v in fields.items()}
    response = client_for(w, "lead_own").post("/api/exceptions/", body(w, **fields), format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not PE.objects.exists()


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {403}),
        ("lead_own", {201}),
        ("lead_other", {403}),
        ("reviewer", {403}),
        ("admin", {403}),
    ],
)
def test_file_permissions(w: Any, role: str, expected: set[int]) -> None:
    response = client_for(w, role).post("/api/exceptions/", body(w), format="json")
    assert response.status_code in expected
    assert PE.objects.count() == (1 if 201 in expected else 0)


@pytest.mark.parametrize("action", ["approve", "reject"])
@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {403}),
        ("lead_own", {403}),  # the requester: nobody decides their own
        ("lead_other", {403}),
        ("reviewer", {200}),
        ("admin", {200}),
    ],
)
def test_decide_permissions(w: Any, action: str, role: str, expected: set[int]) -> None:
    exc = pending(w)
    response = client_for(w, role).post(
        f"/api/exceptions/{exc.pk}/{action}/", {"note": "n"}, format="json"
    )
    assert response.status_code in expected
    exc.refresh_from_db()
    if 200 in expected:
        assert exc.state == ("approved" if action == "approve" else "rejected")
        assert response.json()["decision_note"] == "n"
        assert response.json()["decided_by"] == ROLES[role]
    else:
        assert exc.state == ExceptionState.PENDING


def test_own_exception_403_says_why(w: Any) -> None:
    from django.contrib.auth.models import Group

    w.red_lead.groups.add(Group.objects.get(name="reviewer"))
    exc = pending(w)
    response = client_for(w, "lead_own").post(f"/api/exceptions/{exc.pk}/approve/")
    assert response.status_code == 403
    assert "someone else" in response.json()["detail"][0]


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("anonymous", {401, 403}),
        ("member", {403}),
        ("lead_own", {200}),  # the requester
        ("lead_other", {403}),
        ("reviewer", {403}),
        ("admin", {200}),
    ],
)
def test_withdraw_permissions(w: Any, role: str, expected: set[int]) -> None:
    exc = pending(w)
    response = client_for(w, role).post(f"/api/exceptions/{exc.pk}/withdraw/", {}, format="json")
    assert response.status_code in expected
    exc.refresh_from_db()
    assert exc.state == ("withdrawn" if 200 in expected else "pending")


def test_approve_raises_job_and_withdraw_reverts(w: Any) -> None:
    exc = pending(w)
    assert client_for(w, "reviewer").post(f"/api/exceptions/{exc.pk}/approve/").status_code == 200
    job = client_for(w, "member").get(f"/api/jobs/{w.job.pk}/").json()
    assert job["priority"] == 2000
    assert client_for(w, "lead_own").post(f"/api/exceptions/{exc.pk}/withdraw/").status_code == 200
    assert client_for(w, "member").get(f"/api/jobs/{w.job.pk}/").json()["priority"] == 10


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_decide_closed_or_expired_400_names_state(w: Any, action: str) -> None:
    closed = pending(w, state=ExceptionState.REJECTED)
    expired = pending(w)
    PE.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    for exc in (closed, expired):
        response = client_for(w, "admin").post(f"/api/exceptions/{exc.pk}/{action}/")
        assert response.status_code == 400
        assert "state" in response.json()


def test_withdraw_closed_400_names_state(w: Any) -> None:
    exc = pending(w, state=ExceptionState.EXPIRED)
    response = client_for(w, "admin").post(f"/api/exceptions/{exc.pk}/withdraw/")
    assert response.status_code == 400
    assert "state" in response.json()


def test_unknown_exception_404(w: Any) -> None:
    assert client_for(w, "admin").post("/api/exceptions/999999/approve/").status_code == 404


def test_filters(w: Any) -> None:
    job_exc = pending(w)
    share_exc = pending(w, job=None, share=w.red_share, state=ExceptionState.APPROVED)
    client = client_for(w, "member")

    def ids(query: str) -> list[int]:
        response = client.get(f"/api/exceptions/?{query}")
        assert response.status_code == 200, response.json()
        return sorted(e["id"] for e in response.json()["results"])

    assert ids("state=approved") == [share_exc.pk]
    assert ids(f"job={w.job.pk}") == [job_exc.pk]
    assert ids(f"share={w.red_share.pk}") == [share_exc.pk]
    assert ids(f"team={w.red.pk}") == sorted([job_exc.pk, share_exc.pk])
    assert ids(f"team={w.blue.pk}") == []
    assert ids("requester=red_lead") == sorted([job_exc.pk, share_exc.pk])
    assert ids("requester=nobody") == []
