"""The throttles count in O(1) (governance/api/throttles.py): a sliding-window counter of
two integers per key in Redis, in place of DRF's list of every request time, with the
same rates and the same 429 answer with Retry-After."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import caches
from rest_framework.test import APIClient

from governance.api.throttles import UserThrottle
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_throttles(settings: Any) -> Iterator[None]:
    """The throttles count in the real shared Redis, under a prefix of this test's own
    (a fresh test database reuses user ids: another run's counts must not be seen)."""
    settings.CACHES = {
        **settings.CACHES,
        "shared": {**settings.CACHES["shared"], "KEY_PREFIX": f"test-{uuid.uuid4().hex}"},
    }
    settings.THROTTLE_CACHE = "shared"
    yield


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The throttle's clock, at the start of a minute (a period of the 5/min rate)."""
    now = [60.0 * 29_000_000]
    monkeypatch.setattr(UserThrottle, "timer", lambda self: now[0])
    return now


def test_a_user_over_the_rate_gets_429_and_one_under_it_does_not(
    redis_throttles: None, clock: list[float], monkeypatch: Any
) -> None:
    monkeypatch.setitem(UserThrottle.THROTTLE_RATES, "user", "5/min")
    busy, calm = APIClient(), APIClient()
    busy.force_authenticate(UserFactory())
    calm.force_authenticate(UserFactory())
    for _ in range(5):
        assert busy.get("/api/queues/").status_code == 200
    response = busy.get("/api/queues/")
    assert response.status_code == 429
    assert "detail" in response.json()
    # the 5 slide out of the window next minute: 5 x (1 - 12/60) + 1 fits at 0:12
    assert int(response["Retry-After"]) == 72
    for _ in range(4):
        assert calm.get("/api/queues/").status_code == 200
    clock[0] += 71
    assert busy.get("/api/queues/").status_code == 429
    clock[0] += 1
    assert busy.get("/api/queues/").status_code == 200


def test_the_window_slides_over_the_previous_minute(
    redis_throttles: None, clock: list[float], monkeypatch: Any
) -> None:
    """5 requests late in one minute still count early in the next, in proportion to the
    part of the sliding minute they fill: a burst cannot double the rate at a boundary."""
    monkeypatch.setitem(UserThrottle.THROTTLE_RATES, "user", "5/min")
    client = APIClient()
    client.force_authenticate(UserFactory())
    clock[0] += 59
    for _ in range(5):
        assert client.get("/api/queues/").status_code == 200
    clock[0] += 1  # the next minute: its first second still holds all 5
    response = client.get("/api/queues/")
    assert response.status_code == 429
    assert int(response["Retry-After"]) == 12  # 5 x (1 - 12/60) = 4: room for one more
    clock[0] += 11
    assert client.get("/api/queues/").status_code == 429  # refused requests are not counted
    clock[0] += 2
    assert client.get("/api/queues/").status_code == 200
    assert client.get("/api/queues/").status_code == 429


def test_the_count_is_two_integers_whatever_the_rate(
    redis_throttles: None, clock: list[float], monkeypatch: Any
) -> None:
    """DRF kept every request time of the hour in one entry, read and rewritten whole on
    each request; here each period is one integer incremented in Redis."""
    monkeypatch.setitem(UserThrottle.THROTTLE_RATES, "user", "1000/hour")
    user = UserFactory()
    client = APIClient()
    client.force_authenticate(user)
    for _ in range(30):
        assert client.get("/api/queues/").status_code == 200
    period = int(clock[0] // 3600)
    key = f"throttle_user_{user.pk}"
    assert caches["shared"].get(f"{key}:{period}") == 30
    assert caches["shared"].get(key) is None  # no list of times
