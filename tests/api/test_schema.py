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
    "/api/change-requests/",
    "/api/agreements/",
    "/api/audit/",
    "/api/decisions/",
    "/api/certifications/",
]


def test_schema_generates_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for path in (
        "/api/teams/",
        "/api/queues/{id}/usage/",
        "/api/instance-types/{name}/",
        "/api/change-requests/{id}/approve/",
        "/api/decisions/{id}/resubmit/",
        "/api/decisions/{id}/close/",
        "/api/certifications/{id}/certify/",
        "/api/workloads/{id}/template/",
    ):
        assert path in text


@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/"])
def test_schema_and_docs_for_signed_in_users(path):
    client = APIClient()
    client.force_login(UserFactory(username="someone"))
    assert client.get(path).status_code == 200


def test_schema_for_token_clients():
    UserFactory(username="tok")
    client = APIClient()
    token = client.post("/api/auth/token/", {"username": "tok", "password": "pw"}).json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/schema/").status_code == 200


def test_schema_and_docs_refuse_anonymous_users():
    client = APIClient()
    assert client.get("/api/schema/").status_code in (401, 403)
    response = client.get("/api/docs/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_swagger_ui_comes_from_the_project():
    client = APIClient()
    client.force_login(UserFactory(username="someone"))
    page = client.get("/api/docs/").content.decode()
    assert "cdn" not in page.lower() and "unpkg" not in page.lower()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page
    assert "<script>" not in page  # the start-up script is a file (Content-Security-Policy)


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
