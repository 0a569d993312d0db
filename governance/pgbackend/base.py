"""Django's PostgreSQL backend, checking a kept connection without a round trip.

With ``CONN_HEALTH_CHECKS`` Django runs ``SELECT 1`` on a kept connection before the first
statement of every request and every worker task, so that a connection PostgreSQL closed
meanwhile (a restart) is replaced instead of failing the request. That is a round trip
per request: 50 µs of the process's CPU and 40 µs of PostgreSQL's (``bench/live.py``
submissions make three other round trips).

A connection PostgreSQL closed has something to read: the server's goodbye (a fatal error
message) and the end of the stream. An idle connection, outside a transaction, with
nothing to read has not been closed, and is used as it is. Anything else (data waiting,
a transaction open, a connection libpq already marked bad) gets Django's ``SELECT 1``, so
a connection is never kept that the old check would have replaced. What neither check
sees, a server gone without closing its sockets, fails the request's first statement
(answered 503) and the connection is replaced after it.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        if self.connection is not None and _quiet(self.connection):
            return True
        return bool(super().is_usable())


def _quiet(conn: Any) -> bool:
    """Whether the connection is open, idle outside a transaction and has nothing to
    read (nothing the server sent unasked, such as its goodbye)."""
    pgconn = conn.pgconn
    try:
        if (
            pgconn.status != pq.ConnStatus.OK
            or pgconn.transaction_status != pq.TransactionStatus.IDLE
        ):
            return False
        poll = select.poll()
        poll.register(pgconn.socket, select.POLLIN | select.POLLPRI)
        return not poll.poll(0)
    except (OSError, ValueError, psycopg.Error):
        return False
