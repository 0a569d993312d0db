"""With Redis away, people still sign in and read pages: the cache only saves work."""

from typing import Any

import pytest
from django.core.cache import caches
from django.test import Client

from governance import demo
from governance import settings as project_settings


@pytest.fixture
def redis_away(settings: Any) -> Any:
    """The project's own shared cache, pointed at a port where nothing listens."""
    shared = dict(project_settings.CACHES["shared"])
    shared["LOCATION"] = "redis://127.0.0.1:1/0"
    settings.CACHES = {**settings.CACHES, "shared": shared}
    yield caches["shared"]


@pytest.mark.django_db
def test_sign_in_and_pages_work_while_redis_is_away(redis_away: Any, tmp_path: Any) -> None:
    demo.load(tmp_path)
    client = Client()
    response = client.post("/login/", {"username": "admin", "password": "admin"})
    assert response.status_code == 302
    for path in ("/", "/queues/", "/jobs/", "/teams/", "/partials/usage/", "/partials/feed/"):
        assert client.get(path).status_code == 200, path
    # The session was written through to the database, so it survives the outage.
    assert client.get("/audit/").status_code == 200
