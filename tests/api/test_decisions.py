"""``/api/decisions/`` (docs/workloads.md#decisions): everyone signed in reads; the team's
leads and admins resubmit, reclassify or close; others get 403, bad input a 400 naming
every field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, Decision, Interruption, Job
from tests.factories import UserFactory, make_decision_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
G6 = "ml.g6.xlarge"


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


@pytest.fixture
def world() -> Any:
    return make_decision_world()


def test_everyone_signed_in_lists_and_reads(world: Any) -> None:
    reader = client_for(UserFactory(username="reader"))
    body = reader.get("/api/decisions/").json()
    [row] = body["results"]
    assert row["id"] == world.decision.pk and row["job"] == world.job.pk
    assert (row["state"], row["overdue"], row["team"]) == ("open", False, world.team.pk)
    assert row["workload"] == world.workload.pk
    assert reader.get(f"/api/decisions/?team={world.team.pk}&state=open").json()["count"] == 1
    assert reader.get("/api/decisions/?overdue=true").json()["count"] == 0
    Decision.objects.filter(pk=world.decision.pk).update(
        due_at=world.decision.opened_at - timedelta(minutes=1)
    )
    late = reader.get("/api/decisions/?overdue=true").json()["results"]
    assert [r["id"] for r in late] == [world.decision.pk] and late[0]["overdue"] is True
    detail = reader.get(f"/api/decisions/{world.decision.pk}/").json()
    assert detail["job_name"] == "exhausted"
    assert reader.get("/api/decisions/99999999/").status_code == 404
    assert reader.get("/api/decisions/x1/").status_code == 404


@pytest.mark.parametrize("who", ["member", "other_lead"])
@pytest.mark.parametrize(
    "action,body",
    [("resubmit", {}), ("reclassify", {"note": ""}), ("close", {"reason": "no"})],
)
def test_only_leads_and_admins_answer(world: Any, who: str, action: str, body: dict) -> None:
    response = client_for(getattr(world, who)).post(
        f"/api/decisions/{world.decision.pk}/{action}/", body, format="json"
    )
    assert response.status_code == 403
    assert "leads of team vision" in str(response.json())
    world.decision.refresh_from_db()
    assert world.decision.state == "open"


def test_a_lead_resubmits_with_a_plan_of_other_preferences(world: Any) -> None:
    response = client_for(world.lead).post(
        f"/api/decisions/{world.decision.pk}/resubmit/",
        {"preferences": [{"instance_type": G6}], "count": 1, "note": "g6 instead"},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "resubmitted" and body["decided_by"] == "lead"
    new = Job.objects.get(pk=body["resubmitted_job"])
    assert new.preferences == [{"instance_type": G6, "count": 1}]
    assert new.workload == world.workload
    entry = AuditEntry.objects.get(event_type=AuditEvent.DECISION_RESUBMITTED)
    assert entry.actor_id == world.lead.pk and entry.job_id == world.job.pk


def test_a_bad_resubmission_names_every_field(world: Any) -> None:
    response = client_for(world.lead).post(
        f"/api/decisions/{world.decision.pk}/resubmit/",
        {"priority": "high", "preferences": [{"instance_type": "nope", "count": 1}], "count": 2},
        format="json",
    )
    assert response.status_code == 400
    assert {"priority", "preferences", "count"} <= set(response.json())
    world.decision.refresh_from_db()
    assert world.decision.state == "open"


def test_an_admin_reclassifies_then_the_decision_is_answered(world: Any) -> None:
    admin = client_for(world.admin)
    response = admin.post(f"/api/decisions/{world.decision.pk}/reclassify/", {}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "reclassified"
    world.workload.refresh_from_db()
    assert world.workload.interruption == Interruption.PROTECTED
    assert AuditEntry.objects.filter(event_type=AuditEvent.DECISION_RECLASSIFIED).count() == 1
    again = admin.post(f"/api/decisions/{world.decision.pk}/close/", {"reason": "x"}, format="json")
    assert again.status_code == 400 and "state" in again.json()


def test_close_needs_a_reason(world: Any) -> None:
    lead = client_for(world.lead)
    url = f"/api/decisions/{world.decision.pk}/close/"
    missing = lead.post(url, {}, format="json")
    assert missing.status_code == 400 and "reason" in missing.json()
    blank = lead.post(url, {"reason": " "}, format="json")
    assert blank.status_code == 400 and "reason" in blank.json()
    done = lead.post(url, {"reason": "model retired"}, format="json")
    assert done.status_code == 200
    assert (done.json()["state"], done.json()["note"]) == ("closed", "model retired")
    assert AuditEntry.objects.filter(event_type=AuditEvent.DECISION_CLOSED).count() == 1


def test_the_decisions_signal_per_team_and_the_history_export(world: Any) -> None:
    client = client_for(world.lead)
    client.post(f"/api/decisions/{world.decision.pk}/close/", {"reason": "done"}, format="json")
    window = {
        "from": (world.decision.opened_at - timedelta(hours=1)).isoformat(),
        "to": (world.decision.opened_at + timedelta(hours=1)).isoformat(),
    }
    queue = world.job.queue_id
    body = client.get("/api/signals/", {"queue": queue, "group_by": "team", **window}).json()
    [vision] = [g for g in body["groups"] if g["team"] == "vision"]
    figure = vision["decisions"]
    assert (figure["opened"], figure["decided"], figure["overdue"]) == (1, 1, 0)
    assert figure["time_to_decide"]["p50"] >= 0
    history = client.get(f"/api/queues/{queue}/history/", window).json()
    [row] = history["decisions"]
    assert row["job"] == world.job.pk and row["share"] == "train"
    assert row["opened"] <= row["decided"] < row["due"]


@pytest.mark.parametrize("query", ["team=99999999999999999999", "job=-1", "state=maybe"])
def test_filters_out_of_range_are_a_400_or_nothing(world: Any, query: str) -> None:
    response = client_for(world.member).get(f"/api/decisions/?{query}")
    assert response.status_code in (200, 400), response.content
    if response.status_code == 200:
        assert response.json()["count"] == 0


def test_answers_with_text_beyond_its_bound_name_the_field(world: Any) -> None:
    lead = client_for(world.lead)
    base = f"/api/decisions/{world.decision.pk}"
    long = "x" * 5000
    for action, body, field in (
        ("close", {"reason": long}, "reason"),
        ("reclassify", {"note": long}, "note"),
        ("resubmit", {"note": long, "name": long}, "note"),
    ):
        response = lead.post(f"{base}/{action}/", body, format="json")
        assert response.status_code == 400 and field in response.json(), (action, response.content)
    assert (
        lead.post("/api/decisions/99999999999999999999/close/", {"reason": "x"}).status_code == 404
    )


@pytest.mark.parametrize("value", ["perhaps", "yes", "TRUE!", "1", "2"])
def test_an_overdue_filter_that_is_not_true_or_false_is_a_400_naming_it(
    world: Any, value: str
) -> None:
    """``overdue`` used to ignore what it could not read (the whole list came back, as if
    no filter had been asked for): now the API names the field and the values it takes."""
    reader = client_for(UserFactory(username="reader"))
    response = reader.get(f"/api/decisions/?overdue={value}")
    assert response.status_code == 400, response.content
    [message] = response.json()["overdue"]
    assert "true" in message and "false" in message, message


@pytest.mark.parametrize(("value", "count"), [("true", 0), ("false", 1), ("True", 0), ("FALSE", 1)])
def test_an_overdue_filter_of_true_or_false_still_filters(
    world: Any, value: str, count: int
) -> None:
    reader = client_for(UserFactory(username="reader"))
    response = reader.get(f"/api/decisions/?overdue={value}")
    assert response.status_code == 200 and response.json()["count"] == count
    assert reader.get("/api/decisions/?overdue=").json()["count"] == 1  # not asked
