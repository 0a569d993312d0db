"""``governance.pgbackend``: a kept connection is checked without a round trip when it
is idle and quiet, and one PostgreSQL closed is still found and replaced."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.backends.postgresql import base

from governance.pgbackend.base import DatabaseWrapper


@pytest.fixture
def round_trips(monkeypatch: Any) -> list[bool]:
    """Each ``SELECT 1`` check Django's own backend makes, with its answer."""
    made: list[bool] = []
    real = base.DatabaseWrapper.is_usable

    def counted(self: Any) -> bool:
        made.append(real(self))
        return made[-1]

    monkeypatch.setattr(base.DatabaseWrapper, "is_usable", counted)
    return made


def test_the_product_runs_on_this_backend() -> None:
    assert settings.DATABASES["default"]["ENGINE"] == "governance.pgbackend"
    default = connections["default"]
    assert isinstance(default, DatabaseWrapper) and default.vendor == "postgresql"


@pytest.mark.django_db(transaction=True)
def test_an_idle_kept_connection_is_usable_without_a_statement(round_trips: list[bool]) -> None:
    connection.ensure_connection()
    assert connection.is_usable() and round_trips == []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")  # a transaction open on the server: the check asks it
        assert connection.is_usable()
    assert round_trips == [True]


@pytest.mark.django_db(transaction=True)
def test_a_connection_postgresql_closed_is_found_and_replaced(round_trips: list[bool]) -> None:
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    params = connection.get_connection_params()
    with psycopg.connect(
        host=params.get("host"),
        port=params.get("port"),
        user=params.get("user"),
        password=params.get("password"),
        dbname=params["dbname"],
        autocommit=True,
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 5
    while connection.is_usable() and time.monotonic() < deadline:
        time.sleep(0.01)  # the server's goodbye is on its way
    assert round_trips and round_trips[-1] is False  # the server was asked, and failed
    # As before a request: the dead connection is closed, the next statement reconnects.
    connection.health_check_done = False
    connection.close_if_health_check_failed()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid
