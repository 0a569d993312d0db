"""``REDIS_URL`` forms: with a host, or a unix socket (no host), for redis-py and Celery."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from governance.settings import celery_broker_url


@pytest.mark.parametrize(
    ("url", "broker"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:secret@cache.example:6380/3", "redis://:secret@cache.example:6380/3"),
        ("rediss://cache.example:6380/1", "rediss://cache.example:6380/1"),
        ("redis://localhost", "redis://localhost"),
        ("unix:///run/redis/redis.sock", "redis+socket:///run/redis/redis.sock?virtual_host=0"),
        ("unix:///tmp/r.sock?db=2", "redis+socket:///tmp/r.sock?virtual_host=2"),
    ],
)
def test_broker_url_for_each_form(url: str, broker: str) -> None:
    assert celery_broker_url(url) == broker


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("amqp://guest@localhost//", "expected redis://, rediss:// or unix://"),
        ("redis://localhost/zero", "database number"),
        ("unix:///tmp/r.sock?db=x", "db must be a number"),
        ("unix:///tmp/r.sock?password=x", "unsupported parameter(s) password"),
        ("unix://", "unix:///path/to/redis.sock"),
    ],
)
def test_bad_urls_name_the_variable(url: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL") as error:
        celery_broker_url(url)
    assert says in str(error.value)
