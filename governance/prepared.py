"""Statements PostgreSQL parses and plans once per connection, for the few that run on
every request and every cycle.

Django binds parameters on the client (the values are written into the statement's text)
and never prepares a statement, so PostgreSQL parses, analyses and plans every statement
anew: 40% of the CPU its session spent on a submission (``perf``), more than running the
statements. A statement run through :func:`cursor` is bound on the server and prepared on
its connection the first time (psycopg keeps the last 100 per connection, by text and
parameter types), so each later run only binds and executes it.

Only statements whose text is built once belong here (``selectors.rows``,
``services.inserts``): a text that varies with its values would fill the connection's
cache with statements used once. Each statement's parameters are sent with their types,
so a value PostgreSQL cannot infer a type for where it stands needs a cast in the text.

A connection pooler that hands a session's connection to another client between
transactions (PgBouncer's transaction mode before 1.21) loses prepared statements;
docs/operations.md says what to set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, cast

from django.db import connection
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorWrapper
from psycopg import _queries

# Django's psycopg cursor binding on the server (defined only under psycopg 3, which the
# stubs do not know).
_ServerBinding: Any = ServerBindingCursor


@lru_cache(maxsize=256)
def _split(query: str, encoding: str) -> Any:
    """A statement's text as PostgreSQL takes it (``$n`` placeholders) and where each
    value goes: psycopg's own conversion, kept for every statement run here."""
    return _queries._query2pg_nocache(query.encode(encoding), encoding)


class _Statement(_queries.PostgresQuery):
    """psycopg's statement and values, the statement's conversion kept (``_split``).

    psycopg keeps it only for a statement shorter than 4 kB with at most 50 values, and
    converted a submission's INSERT of 65 values and a cycle's many-row INSERTs anew at
    each run, with a regular expression over the whole text: 7% of the web's and of the
    worker's CPU (``py-spy --gil``). The statements run here are a fixed few."""

    def convert(self, query: Any, vars: Any) -> None:
        if vars is None or not isinstance(query, str):
            super().convert(query, vars)
            return
        self.query, self._want_formats, self._order, self._parts = _split(query, self._tx.encoding)
        self.dump(vars)


class _Prepared(_ServerBinding):
    """A cursor binding on the server that prepares every statement it runs."""

    _query_cls = _Statement

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        kwargs["prepare"] = True
        return super().execute(query, params, **kwargs)

    def _send_query_prepared(self, name: bytes, pgq: Any, **kwargs: Any) -> None:
        # psycopg notes the statement it sent (``_query``, which Django logs and tests'
        # captured queries show) only when it runs one unprepared.
        self._query = pgq
        super()._send_query_prepared(name, pgq, **kwargs)


@contextmanager
def cursor() -> Iterator[CursorWrapper]:
    """A cursor of the default connection, as ``connection.cursor()`` gives (its errors
    Django's, its queries logged where Django logs them), that prepares its statements."""
    # What ``connection.cursor()`` does before it makes a cursor (``BaseDatabaseWrapper
    # ._cursor``): the health check of a kept connection, and connecting.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        # Django's own wrapping of a new cursor (``BaseDatabaseWrapper._prepare_cursor``):
        # a debug cursor where queries are logged, a plain one otherwise.
        wrapped = cast(Any, connection)._prepare_cursor(_Prepared(connection.connection))
    with wrapped:
        yield wrapped
