"""``/api/signals/``, ``/api/signals/chargeback/`` and ``/api/queues/{id}/history/`` on
a queue run by the simulated fleet (the history of ``tests/services/test_history.py``)."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from rest_framework.test import APIClient

from scheduler import signals, simulate
from tests.services.test_history import at, clock, run_history, world  # noqa: F401

pytestmark = pytest.mark.django_db

WINDOW = {"from": "2025-03-03T07:59:59Z", "to": "2025-03-03T08:06:40Z"}  # at(-1), at(400)


@pytest.fixture
def client(world: Any, clock: Any) -> APIClient:  # noqa: F811
    run_history(world, clock)
    clock.now = at(400)
    api = APIClient()
    api.force_authenticate(world.red_lead)
    return api


def group(answer: dict[str, Any], name: str) -> dict[str, Any]:
    key = "team" if "team" in answer["groups"][0] else "share"
    return next(g for g in answer["groups"] if g[key] == name)


def test_signals_per_share_as_json(client: APIClient, world: Any) -> None:  # noqa: F811
    response = client.get("/api/signals/", {"queue": world.queue.pk, **WINDOW})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["window"] == {
        "from": "2025-03-03T07:59:59+00:00",
        "to": "2025-03-03T08:06:40+00:00",
    }
    assert body["queue"]["id"] == world.queue.pk
    assert [g["share"] for g in body["groups"]] == ["alpha", "beta"]
    beta = group(body, "beta")
    # b1 reclaimed twice (at 10 s and 70 s, the second fails it), b2 by priority at 22 s
    assert beta["preemptions_suffered"] == {
        "reclaim": 2,
        "priority": 1,
        "capacity_lost": 0,
        "total": 3,
    }
    assert beta["jobs_finished"] == {
        "SUCCEEDED": 2,
        "FAILED": 1,
        "TIMED_OUT": 0,
        "CANCELLED": 1,
        "total": 4,
    }
    assert group(body, "alpha")["preemptions_caused"]["reclaim"] == 2
    assert beta["policy_changes"] == {
        "share_edits": 0,
        "exceptions_filed": 0,
        "exceptions_approved": 0,
        "exceptions_rejected": 0,
        "exceptions_expired": 0,
        "exceptions_withdrawn": 0,
        "priority_changes": 0,
        "change_requests": {"filed": 0, "approved": 0, "rejected": 0, "withdrawn": 0},
    }
    assert group(body, "alpha")["policy_changes"]["share_edits"] == 1  # the edit at 45 s
    # the same figures as the signals module on the exported history
    history = client.get(f"/api/queues/{world.queue.pk}/history/", WINDOW).json()
    rec = signals.Recording(history["scenario"], history["recorded"]["events"], history["teams"])
    direct = signals.compute(rec, 0, 401_000)
    assert group(direct, "beta")["cost"]["total"] == pytest.approx(beta["cost"]["total"])
    assert group(direct, "beta")["idle_lendable_seconds"] == beta["idle_lendable_seconds"]


def test_signals_per_team_and_as_csv(client: APIClient, world: Any) -> None:  # noqa: F811
    body = client.get(
        "/api/signals/", {"queue": world.queue.pk, "group_by": "team", **WINDOW}
    ).json()
    assert [g["team"] for g in body["groups"]] == ["red", "blue"]
    response = client.get("/api/signals/", {"queue": world.queue.pk, "format": "csv", **WINDOW})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [r["share"] for r in rows] == ["(queue)", "alpha", "beta"]
    assert rows[2]["preemptions_suffered.total"] == "3"
    assert "cost.total.borrowed" in rows[0]


def test_history_endpoint_replays_exactly(client: APIClient, world: Any) -> None:  # noqa: F811
    response = client.get(f"/api/queues/{world.queue.pk}/history/", WINDOW)
    assert response.status_code == 200
    body = response.json()
    assert simulate.run(body["scenario"])["events"] == body["recorded"]["events"]
    assert client.get("/api/queues/999999/history/", WINDOW).status_code == 404


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "queue"),
        ({"queue": "abc"}, "queue"),
        ({"queue": "99999999999999999999999"}, "queue"),
        ({"queue": "999999"}, "queue"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2025-13-45"}, "to"),
        ({"from": "2025-03-04", "to": "2025-03-03"}, "to"),
        ({"from": "2025-01-01", "to": "2025-03-01"}, "to"),
        ({"from": "1900-01-01", "to": "1900-01-02"}, "from"),
        ({"group_by": "queue"}, "group_by"),
    ],
)
def test_signals_errors_name_the_field(
    client: APIClient,
    world: Any,  # noqa: F811
    params: dict[str, str],
    field: str,
) -> None:
    query = {"queue": world.queue.pk, **params} if field != "queue" else params
    response = client.get("/api/signals/", query)
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_chargeback_per_team_and_month(client: APIClient, world: Any) -> None:  # noqa: F811
    body = client.get("/api/signals/chargeback/", {"month": "2025-03"}).json()
    assert body["month"] == "2025-03"
    teams = {(r["team"], r["instance_type"]) for r in body["rows"]}
    assert ("blue", "ml.g5.xlarge") in teams and ("red", "ml.p4d.24xlarge") in teams
    signals_body = client.get(
        "/api/signals/",
        {
            "queue": world.queue.pk,
            "group_by": "team",
            "from": "2025-03-01T00:00:00Z",
            "to": "2025-04-01T00:00:00Z",
        },
    ).json()
    blue_cost = group(signals_body, "blue")["cost"]["ml.g5.xlarge"]
    row = next(
        r for r in body["rows"] if r["team"] == "blue" and r["instance_type"] == "ml.g5.xlarge"
    )
    assert row["borrowed_cost"] == pytest.approx(blue_cost["borrowed"], abs=1e-4)
    assert row["own_cost"] + row["borrowed_cost"] == pytest.approx(row["total_cost"], abs=1e-3)
    response = client.get("/api/signals/chargeback/", {"month": "2025-03", "format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    assert response.content.decode().splitlines()[0].startswith("month,team,queue")
    assert client.get("/api/signals/chargeback/", {"month": "2025-3"}).status_code == 400
    assert client.get("/api/signals/chargeback/", {"month": "2025-13"}).status_code == 400


def test_signals_need_a_signed_in_user(world: Any) -> None:  # noqa: F811
    response = APIClient().get("/api/signals/", {"queue": world.queue.pk})
    assert response.status_code in (401, 403)


def test_csv_exports_write_formula_names_as_text(client: APIClient, world: Any) -> None:  # noqa: F811
    """A team lead names their team like a formula; the signals and chargeback CSVs
    carry it as text (a leading apostrophe), and negative or plain figures unchanged."""
    from governance.models import Team

    Team.objects.filter(name="blue").update(name="=cmd|' /C calc'!A0")
    signals_csv = client.get(
        "/api/signals/",
        {"queue": world.queue.pk, "group_by": "team", "format": "csv", **WINDOW},
    ).content.decode()
    chargeback_csv = client.get(
        "/api/signals/chargeback/", {"month": "2025-03", "format": "csv"}
    ).content.decode()
    for body in (signals_csv, chargeback_csv):
        cells = [cell for row in csv.reader(io.StringIO(body)) for cell in row]
        assert "'=cmd|' /C calc'!A0" in cells
        assert not any(cell.startswith(("=", "+", "@", "\t", "\r")) for cell in cells)
