"""The OpenAPI schema and docs, and that anonymous users get nothing from the lists."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

LISTS = [
    "/api/teams/",
    "/api/instance-types/",
    "/api/queues/",
    "/api/shares/",
    "/api/priority-definitions/",
    "/api/jobs/",
    "/api/exceptions/",
    "/api/agreements/",
    "/api/audit/",
]


def test_schema_generates(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--file", str(out))
    text = out.read_text()
    for path in ("/api/teams/", "/api/queues/{id}/usage/", "/api/instance-types/{name}/"):
        assert path in text


@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/"])
def test_schema_and_docs_for_signed_in_users(path):
    client = APIClient()
    client.force_authenticate(UserFactory(username="someone"))
    assert client.get(path).status_code == 200


@pytest.mark.parametrize("path", LISTS)
def test_anonymous_gets_nothing(path):
    response = APIClient().get(path)
    assert response.status_code in (401, 403)


def test_token_auth_reads():
    UserFactory(username="tok")
    client = APIClient()
    token = client.post("/api/auth/token/", {"username": "tok", "password": "pw"}).json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/queues/").status_code == 200
