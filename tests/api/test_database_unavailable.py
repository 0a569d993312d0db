"""With PostgreSQL unreachable: JSON 503 with Retry-After under /api/, a plain 503 page on
the web, no traceback anywhere. The connection really fails: it is pointed at a socket
folder where no server listens (the fault suite restarts a real server, tests/faults)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from governance.unavailable import DatabaseUnavailableMiddleware


@pytest.fixture
def database_away(django_db_blocker: Any, tmp_path: Path) -> Iterator[None]:
    """Requests in this test find no PostgreSQL: its address is an empty socket folder."""
    with django_db_blocker.unblock():
        saved = dict(connection.settings_dict)
        connection.close()
        connection.settings_dict.update(HOST=str(tmp_path), PORT="")
        try:
            yield
        finally:
            connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)


def test_api_answers_json_503_with_retry_after(database_away: None) -> None:
    response = Client().get("/api/jobs/", HTTP_AUTHORIZATION="Token 0123456789abcdef")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "5"
    assert response.json() == {
        "detail": [
            "The database is unavailable at the moment; nothing was changed. "
            "Try again in 5 seconds."
        ]
    }


def test_api_write_answers_503_too(database_away: None) -> None:
    response = Client().post(
        "/api/jobs/",
        {"share": 1, "name": "x", "preferences": []},
        content_type="application/json",
        HTTP_AUTHORIZATION="Token 0123456789abcdef",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    assert response.status_code == 503 and response["Retry-After"] == "5"


def test_pages_answer_a_plain_503_page(database_away: None) -> None:
    # Signing in reads the user from the database.
    response = Client().post("/login/", {"username": "admin", "password": "admin"})
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert response["Retry-After"] == "5"
    page = response.content.decode()
    assert "Temporarily unavailable" in page and "nothing was changed" in page
    assert "Traceback" not in page and "OperationalError" not in page


def test_other_errors_are_left_alone() -> None:
    middleware = DatabaseUnavailableMiddleware(lambda request: None)  # type: ignore[arg-type,return-value]
    assert middleware.process_exception(None, ValueError("bug")) is None  # type: ignore[arg-type]
