"""Session-level fixtures: servers and Celery.

The database and Redis themselves come from the settings (``DATABASE_URL`` / ``REDIS_URL``,
else the embedded servers; ``./scripts/test`` provides them), and pytest-django creates the
test database on that server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def database_url(db: dict[str, Any]) -> str:
    """A ``DATABASE_URL`` for a Django database settings dict (the inverse of the settings)."""
    credentials = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    host, port = db["HOST"] or "", db["PORT"] or ""
    query = [f"sslmode={db['OPTIONS']['sslmode']}"] if db["OPTIONS"].get("sslmode") else []
    if host.startswith("/"):  # unix socket directory
        query.append(f"host={quote(host)}")
        location = ""
    else:
        location = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    suffix = f"?{'&'.join(query)}" if query else ""
    return f"postgresql://{credentials}@{location}/{quote(db['NAME'])}{suffix}"


@pytest.fixture(scope="session")
def celery_worker_process(
    django_db_setup: None, django_db_blocker: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``celery -A governance worker`` on the test database, for tests marked ``live``.

    It runs in another process, so it sees committed data only: use it with
    ``transactional_db``, not ``db``.
    """
    from governance.celery import app

    env = dict(
        os.environ,
        DATABASE_URL=database_url(connection.settings_dict),
        REDIS_URL=settings.REDIS_URL,
        CELERY_TASK_ALWAYS_EAGER="false",
        # as deployed (./scripts/run, docs/operations.md): the worker keeps its connection
        DB_CONN_MAX_AGE="60",
    )
    command = [sys.executable, "-m", "celery", "-A", "governance", "worker"]
    command += ["--pool", "solo", "--loglevel", "INFO", "--hostname", f"test-{os.getpid()}@%h"]
    # The scheduling queue and the what-if queue (./scripts/run gives each its own worker).
    command += ["--queues", f"celery,{settings.WHATIF_QUEUE}"]
    worker = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=[f"test-{os.getpid()}@{os.uname().nodename}"]):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Celery worker for the live tests did not start")
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings: Any) -> None:
    """Hashing passwords properly costs ~100 ms each; tests create hundreds of users."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_throttles(settings: Any) -> None:
    """Throttles count in this process's cache, empty for each test: the shared Redis
    would carry counts from one test (and one test run) to the next."""
    from django.core.cache import caches

    settings.THROTTLE_CACHE = "default"
    caches["default"].clear()


def _flush_past_the_audit_guards() -> None:
    """Transactional tests end with Django's flush, a TRUNCATE of every table, which the
    audit tables refuse (migration 0021). In the test database the flush turns their
    triggers off for its own transaction (the tests connect as the tables' owner, who may)
    and puts back the site chain's head the migrations made, as a fresh database has it."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    from governance.models.audit import GENESIS_HASH

    plain = DatabaseOperations.sql_flush
    if getattr(plain, "past_audit_guards", False):
        return

    def sql_flush(self: Any, style: Any, tables: Any, **kwargs: Any) -> list[str]:
        statements = plain(self, style, tables, **kwargs)
        if not statements or "governance_auditchainhead" not in tables:
            return statements
        audit_tables = [t for t in tables if t.startswith("governance_audit")]
        return [
            *(f"ALTER TABLE {table} DISABLE TRIGGER USER" for table in audit_tables),
            *statements,
            "INSERT INTO governance_auditchainhead (chain, last_seq, last_hash) "
            f"VALUES ('site', 0, '{GENESIS_HASH}')",
            *(f"ALTER TABLE {table} ENABLE TRIGGER USER" for table in audit_tables),
        ]

    sql_flush.past_audit_guards = True  # type: ignore[attr-defined]
    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]

    # A live test's worker may still be inside a cycle when the flush truncates: their
    # locks can meet in a deadlock, and PostgreSQL aborts one side. If that is the flush,
    # it is simply run again once the worker's transaction is through.
    plain_execute = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self: Any, sql_list: Any) -> None:
        from django.db import OperationalError

        for attempt in range(5):
            try:
                plain_execute(self, sql_list)
                return
            except OperationalError as exc:
                if attempt == 4 or "deadlock detected" not in str(exc):
                    raise
                time.sleep(0.5)

    DatabaseOperations.execute_sql_flush = execute_sql_flush  # type: ignore[method-assign]


_flush_past_the_audit_guards()


@pytest.fixture(autouse=True)
def _fingerprints_held_through_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue's state fingerprint is kept for ``FINGERPRINT_SECONDS`` while no event or
    audit entry is written: a test that happened to cross a window's boundary would read
    the digest once more, and what it counts would depend on the clock. Held through the
    test; the tests of that window move it themselves."""
    from governance.selectors import state_cache

    monkeypatch.setattr(state_cache, "FINGERPRINT_SECONDS", 10**9)
