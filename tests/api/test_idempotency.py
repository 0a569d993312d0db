"""``Idempotency-Key`` on the creating endpoints: a retry gets the first answer, never a
second object; a reused key with another body is a 409 naming the header."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import Agreement, IdempotencyKey, Job, PriorityException
from governance.services import idempotency
from tests.factories import make_job, make_world

G5 = "ml.g5.xlarge"
HEADER = "HTTP_IDEMPOTENCY_KEY"


@pytest.fixture
def w(db: None) -> Any:
    return make_world()


def client_of(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def job_body(w: Any, name: str = "train") -> dict[str, Any]:
    return {
        "share": w.red_share.pk,
        "name": name,
        "preferences": [{"instance_type": G5, "count": 1}],
    }


def submit(client: APIClient, body: dict[str, Any], key: str | None) -> Any:
    extra = {HEADER: key} if key is not None else {}
    return client.post("/api/jobs/", body, format="json", **extra)


def test_a_retry_gets_the_first_answer_and_creates_nothing(w: Any) -> None:
    client = client_of(w.red_member)
    first = submit(client, job_body(w), "k-1")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first
    again = submit(client, job_body(w), "k-1")
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1


def test_key_order_in_the_body_does_not_matter(w: Any) -> None:
    client = client_of(w.red_member)
    body = job_body(w)
    submit(client, body, "k-1")
    reordered = dict(reversed(list(body.items())))
    assert submit(client, reordered, "k-1")["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1


def test_without_the_header_every_request_creates(w: Any) -> None:
    client = client_of(w.red_member)
    assert submit(client, job_body(w), None).status_code == 201
    assert submit(client, job_body(w), None).status_code == 201
    assert Job.objects.count() == 2


def test_same_key_with_another_body_is_409_naming_the_header(w: Any) -> None:
    client = client_of(w.red_member)
    submit(client, job_body(w, "one"), "k-1")
    response = submit(client, job_body(w, "two"), "k-1")
    assert response.status_code == 409
    assert "different body" in response.json()["Idempotency-Key"][0]
    assert list(Job.objects.values_list("name", flat=True)) == ["one"]


def test_same_key_on_another_endpoint_is_409(w: Any) -> None:
    client = client_of(w.admin)
    submit(client, job_body(w), "k-1")
    response = client.post("/api/agreements/", {"title": "t"}, format="json", **{HEADER: "k-1"})
    assert response.status_code == 409
    assert "another endpoint" in response.json()["Idempotency-Key"][0]
    assert not Agreement.objects.exists()


def test_keys_are_per_user(w: Any) -> None:
    submit(client_of(w.red_member), job_body(w), "shared-key")
    response = submit(client_of(w.red_lead), job_body(w), "shared-key")
    assert response.status_code == 201 and "Idempotent-Replayed" not in response
    assert Job.objects.count() == 2


@pytest.mark.parametrize("key", ["", "x" * 256, "clé", "tab\there"])
def test_a_malformed_key_is_400_naming_the_header(w: Any, key: str) -> None:
    response = submit(client_of(w.red_member), job_body(w), key)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()
    assert not Job.objects.exists() and not IdempotencyKey.objects.exists()


def test_a_failed_request_keeps_nothing_so_it_may_be_sent_again(w: Any) -> None:
    client = client_of(w.red_member)
    refused = submit(client, {**job_body(w), "preferences": []}, "k-1")
    assert refused.status_code == 400 and "preferences" in refused.json()
    assert not IdempotencyKey.objects.exists()
    assert submit(client, job_body(w), "k-1").status_code == 201
    assert Job.objects.count() == 1


def test_a_key_is_honoured_for_24_hours_then_forgotten(w: Any) -> None:
    client = client_of(w.red_member)
    submit(client, job_body(w), "k-1")
    stored = IdempotencyKey.objects.get()
    stored.created_at = timezone.now() - timedelta(hours=23)
    stored.save()
    assert submit(client, job_body(w), "k-1")["Idempotent-Replayed"] == "true"
    stored.created_at = timezone.now() - timedelta(hours=25)
    stored.save()
    response = submit(client, job_body(w), "k-1")
    assert response.status_code == 201 and "Idempotent-Replayed" not in response
    assert Job.objects.count() == 2


def test_purge_deletes_expired_keys_only(w: Any) -> None:
    client = client_of(w.red_member)
    submit(client, job_body(w, "old"), "old")
    submit(client, job_body(w, "new"), "new")
    IdempotencyKey.objects.filter(key="old").update(created_at=timezone.now() - timedelta(days=2))
    assert idempotency.idempotency_purge() == 1
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]


def test_exceptions_and_agreements_replay_too(w: Any) -> None:
    job = make_job(w.red_share, w.red_member, priority=10)
    body = {
        "team": w.red.pk,
        "job": job.pk,
        "priority": 2000,
        "justification": "Release blocked.",
        "expires_at": (timezone.now() + timedelta(days=2)).isoformat(),
    }
    lead = client_of(w.red_lead)
    first = lead.post("/api/exceptions/", body, format="json", **{HEADER: "e-1"})
    again = lead.post("/api/exceptions/", body, format="json", **{HEADER: "e-1"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and PriorityException.objects.count() == 1

    admin = client_of(w.admin)
    first = admin.post("/api/agreements/", {"title": "t"}, format="json", **{HEADER: "a-1"})
    again = admin.post("/api/agreements/", {"title": "t"}, format="json", **{HEADER: "a-1"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and Agreement.objects.count() == 1


def test_the_schema_documents_the_header(w: Any) -> None:
    schema = client_of(w.red_member).get("/api/schema/?format=json").json()
    for path in ("/api/jobs/", "/api/exceptions/", "/api/agreements/"):
        parameters = schema["paths"][path]["post"].get("parameters", [])
        assert {"in": "header", "name": "Idempotency-Key"} in [
            {"in": p["in"], "name": p["name"]} for p in parameters
        ], path
        assert "201" in schema["paths"][path]["post"]["responses"], path


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_create_exactly_one_job() -> None:
    """Eight clients send the same request with the same key at the same moment."""
    w = make_world()
    clients = 8
    barrier = threading.Barrier(clients)
    answers: list[tuple[int, dict[str, Any]]] = []
    lock = threading.Lock()

    def send() -> None:
        try:
            client = client_of(w.red_member)
            barrier.wait()
            response = submit(client, job_body(w), "at-once")
            with lock:
                answers.append((response.status_code, response.json()))
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=send) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert Job.objects.count() == 1
    job_id = Job.objects.get().pk
    assert [(status, body["id"]) for status, body in answers] == [(201, job_id)] * clients
