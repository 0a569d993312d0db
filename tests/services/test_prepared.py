"""``governance.prepared``: the hottest statements are prepared once per connection and
otherwise behave as Django's own cursors do (errors, logged queries, results)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from governance import prepared
from governance.models import Job, JobState
from governance.selectors.shares import share_for_submission
from governance.selectors.tokens import with_key
from governance.services import tokens
from scheduler.cycle import read
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db


def _prepared_runs(text: str) -> int | None:
    """How many times this connection ran its prepared statement whose text starts with
    ``text``; None when there is none."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE starts_with(statement, %s)",
            [text],
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def test_a_statement_is_prepared_once_and_run_again_as_prepared() -> None:
    text = "SELECT %s::bigint + 1 AS prepared_probe"
    with prepared.cursor() as cursor:
        cursor.execute(text, [41])
        assert cursor.fetchone() == (42,)
    with prepared.cursor() as cursor:
        for n in range(5):
            cursor.execute(text, [n])
            assert cursor.fetchone() == (n + 1,)
    assert _prepared_runs("SELECT $1::bigint + 1 AS prepared_probe") == 6


def test_the_reads_every_request_makes_are_prepared() -> None:
    w = make_world()
    _, token = tokens.token_create(actor=w.red_member)
    reads = ('SELECT a."digest"', 'SELECT s."id"')
    assert [t.user.pk for t in with_key(token[:15])] == [w.red_member.pk]
    assert share_for_submission(w.red_share.pk, w.red_member.pk) is not None
    before = [_prepared_runs(text) or 0 for text in reads]
    assert min(before) >= 1  # prepared by now, whatever ran on this connection before
    for _ in range(3):
        assert [t.user.pk for t in with_key(token[:15])] == [w.red_member.pk]
        found = share_for_submission(w.red_share.pk, w.red_member.pk)
        assert found is not None and found.role == "member"
    assert [_prepared_runs(text) for text in reads] == [n + 3 for n in before]


def test_errors_are_djangos_and_queries_are_logged_with_their_text() -> None:
    w = make_world()
    with CaptureQueriesContext(connection) as queries, prepared.cursor() as cursor:
        cursor.execute("SELECT name FROM governance_team WHERE id = %s", [w.red.pk])
        assert cursor.fetchone() == (w.red.name,)
    assert queries.captured_queries[-1]["sql"] == ("SELECT name FROM governance_team WHERE id = $1")
    with pytest.raises(IntegrityError), transaction.atomic(), prepared.cursor() as cursor:
        cursor.execute("INSERT INTO governance_team (name) VALUES (%s)", [None])


def test_switched_off_nothing_is_prepared_and_statements_still_run(monkeypatch: Any) -> None:
    """``DB_PREPARE=0`` (a pooler that drops prepared statements): bound on the server,
    prepared never."""
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)
    with prepared.cursor() as cursor:
        cursor.execute("SELECT %s::int * 2 AS unprepared_probe", [21])
        assert cursor.fetchone() == (42,)
    assert _prepared_runs("SELECT $1::int * 2 AS unprepared_probe") is None


def test_a_long_statement_with_many_values_takes_each_runs_own_values() -> None:
    """Its conversion is kept (psycopg keeps none for 60 values), never its values."""
    text = "SELECT " + ", ".join(["%s::int"] * 60) + " -- " + "x" * 5000
    with prepared.cursor() as cursor:
        for start in (0, 1000):
            cursor.execute(text, list(range(start, start + 60)))
            assert cursor.fetchone() == tuple(range(start, start + 60))
        cursor.execute("SELECT %(a)s::int - %(b)s::int", {"a": 50, "b": 8})
        assert cursor.fetchone() == (42,)


def _generic_plan(text: str, params: str) -> str:
    """The plan PostgreSQL keeps for this connection's prepared statement starting with
    ``text`` once it settles on a generic one (forced here), run with ``params``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM pg_prepared_statements WHERE starts_with(statement, %s)", [text]
        )
        (name,) = cursor.fetchone()
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT TEXT) EXECUTE {name}({params})")
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_cycles_read_of_changed_jobs_reads_those_jobs_only_however_old_the_statistics() -> None:
    """The statistics saw the queue with 3 jobs, it has 2,000 since: the plan kept for the
    incremental cycle's read still fetches the named jobs by key. (It read the queue's
    every job through its index, old ones included, when the queue was in its WHERE.)"""
    w = make_world()
    first = [make_job(w.red_share, w.red_member).pk for _ in range(3)]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE governance_job")
    template = make_job(w.red_share, w.red_member)
    Job.objects.bulk_create(
        [
            Job(
                queue=w.queue,
                share=w.red_share,
                submitter=w.red_member,
                name="old",
                state=JobState.SUCCEEDED,
                preferences=template.preferences,
                submitted_at=template.submitted_at,
            )
            for _ in range(2000)
        ]
    )
    with transaction.atomic():
        for _ in range(6):
            assert [row["id"] for row in read.changed_rows(w.queue.pk, first)] == first
        ids = ",".join(map(str, first))
        plan = _generic_plan("SELECT queue_id,", f"'{{{ids}}}'")
    assert "governance_job_pkey" in plan, plan
    assert "Rows Removed by Filter" not in plan, plan
    assert read.changed_rows(w.queue.pk + 1, first) == []  # another queue's: none
