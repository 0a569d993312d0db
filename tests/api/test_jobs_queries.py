"""What one ``POST /api/jobs/`` costs PostgreSQL: its queries, counted and pinned.

A submission mostly waits on the database (docs/operations.md#submissions-per-second),
so each query it makes is a round trip every submitter pays. The count below is the
whole request as an API client sends it (its token checked, the job, its event and its
audit entry written by one statement, a transaction of its own, the 201 answer built);
a change that adds a query fails here and has to say why.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from governance.models import AuditEntry, Job, JobEvent, PriorityDefinition
from governance.services import tokens
from tests.factories import make_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"

# The token with its user and the user's site roles (1), the share with its queue, team,
# limits' types, the submitter's role in its team, the priority bands and the new job's id
# (1), the job, its event and its audit entry in one statement (1), with no BEGIN and no
# COMMIT: that statement is its transaction. Nothing after it: the answer is built from
# what the service wrote. (Fourteen before this was pinned, then nine, then seven.)
POST_QUERIES = {"bands": 3, "no bands": 3}


def _client(user: Any) -> APIClient:
    _, token = AuthToken.objects.create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def _body(w: Any, **fields: Any) -> dict[str, Any]:
    return {
        "share": w.red_share.pk,
        "queue": w.queue.pk,
        "name": "train",
        "duration": 30,
        "preferences": [{"instance_type": G5, "count": 1}],
        "program": {"command": ["python", "train.py"]},
        **fields,
    }


@pytest.mark.parametrize("bands", POST_QUERIES)
def test_a_submission_costs_a_pinned_number_of_queries(bands: str) -> None:
    w = make_world()
    if bands == "no bands":  # a fresh installation, as bench/live.py submits
        PriorityDefinition.objects.all().delete()
    client = _client(w.red_member)
    assert client.post("/api/jobs/", _body(w), format="json").status_code == 201  # warm
    with CaptureQueriesContext(connection) as ctx:
        response = client.post("/api/jobs/", _body(w), format="json")
    assert response.status_code == 201, response.json()
    sql = "\n".join(q["sql"] for q in ctx.captured_queries)
    assert len(ctx.captured_queries) == POST_QUERIES[bands], sql
    # Still everything a submission writes, in one transaction with its audit entry.
    job = Job.objects.get(pk=response.json()["id"])
    assert JobEvent.objects.filter(job=job, type="submitted").count() == 1
    assert AuditEntry.objects.filter(job_id=job.pk, event_type="job.submitted").count() == 1
    # No transaction opened for it: the one statement that writes is one.
    assert not any(q["sql"].startswith(("BEGIN", "SAVEPOINT")) for q in ctx.captured_queries)
    assert sum(q["sql"].startswith(("INSERT", "WITH")) for q in ctx.captured_queries) == 1


def test_the_submitter_sees_the_program_in_the_answer_and_others_do_not() -> None:
    w = make_world()
    response = _client(w.red_member).post("/api/jobs/", _body(w), format="json")
    assert response.status_code == 201
    assert response.json()["program"] == {"command": ["python", "train.py"]}
    job_id = response.json()["id"]
    other = _client(w.blue_lead).get(f"/api/jobs/{job_id}/")
    assert other.status_code == 200 and other.json()["program"] is None


def test_a_refused_submission_still_names_its_fields() -> None:
    w = make_world()
    response = _client(w.red_member).post(
        "/api/jobs/",
        _body(w, name="", preferences=[{"instance_type": "no-such-type", "count": 1}]),
        format="json",
    )
    assert response.status_code == 400
    assert set(response.json()) >= {"name", "preferences"}
    outsider = _client(w.outsider).post("/api/jobs/", _body(w), format="json")
    assert outsider.status_code == 403 and "share" in outsider.json()


def test_an_expired_token_is_refused_and_a_new_token_clears_the_expired_ones() -> None:
    w = make_world()
    expired, text = AuthToken.objects.create(user=w.red_member)
    AuthToken.objects.filter(pk=expired.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    other_expired, _ = AuthToken.objects.create(user=w.red_member)
    AuthToken.objects.filter(pk=other_expired.pk).update(
        expiry=timezone.now() - timedelta(seconds=1)
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {text}")
    assert client.get("/api/jobs/").status_code == 401
    assert not AuthToken.objects.filter(pk=expired.pk).exists()
    # Requests no longer sweep the user's other tokens; making a new one does.
    assert AuthToken.objects.filter(pk=other_expired.pk).exists()
    tokens.token_create(actor=w.red_member)
    assert not AuthToken.objects.filter(pk=other_expired.pk).exists()
    assert AuthToken.objects.filter(user=w.red_member).count() == 1
