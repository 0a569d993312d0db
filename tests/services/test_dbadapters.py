"""The connection's own conversions: timestamps read and arrays sent give exactly the
values Django's and psycopg's would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import DataError, connection
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.adapt import PyFormat, Transformer
from psycopg.types import array

from governance.dbadapters import ListDumper, loader_for
from governance.models import Job
from tests.factories import TeamFactory, UserFactory, make_job, make_queue, make_share

pytestmark = pytest.mark.django_db

# Values PostgreSQL prints in every shape its ISO style has: whole seconds, one to six
# fraction digits, the first and last representable days, and offsets with minutes and
# with seconds (a local mean time before 1900 once the session is in such a zone).
LITERALS = [
    "2026-12-03 23:08:11+00",
    "2026-12-03 23:08:11.5+00",
    "2026-12-03 23:08:11.973753+00",
    "2026-12-03 23:08:11.000001+00",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
    "2024-02-29 12:00:00+05:30",
    "1890-06-01 12:00:00+00",
]


def _read(sql: str, django_loader: bool) -> list[object]:
    with connection.cursor() as cursor:
        if django_loader:
            register_tzloader(connection.timezone, cursor.cursor)
        cursor.execute(sql)
        row = cursor.fetchone()
    return list(row)


def _select(literals: list[str]) -> str:
    return "SELECT " + ", ".join(f"'{value}'::timestamptz" for value in literals)


def test_a_new_connection_reads_timestamps_with_the_c_parsing_loader() -> None:
    connection.ensure_connection()
    loader = connection.connection.adapters.get_loader(1184, 0)  # timestamptz, text
    assert loader is loader_for(connection.timezone)


def test_every_iso_shape_reads_as_django_reads_it() -> None:
    ours = _read(_select(LITERALS), django_loader=False)
    theirs = _read(_select(LITERALS), django_loader=True)
    assert ours == theirs
    assert all(value.tzinfo is UTC for value in ours)
    assert ours[2] == datetime(2026, 12, 3, 23, 8, 11, 973753, tzinfo=UTC)
    assert ours[6] == datetime(2024, 2, 29, 6, 30, tzinfo=UTC)


def test_a_session_in_another_zone_still_reads_the_same_instants() -> None:
    """Offsets with seconds (Amsterdam's mean time of 1890 was +00:19:32) and half hours
    are parsed and converted, not dropped."""
    utc_values = _read(_select(LITERALS), django_loader=False)
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Europe/Amsterdam'")
        try:
            cursor.execute("SELECT '1890-06-01 12:00:00+00'::timestamptz::text")
            assert cursor.fetchone()[0] == "1890-06-01 12:19:32+00:19:32"
            cursor.execute(_select(LITERALS[:4] + LITERALS[6:]))
            zoned = list(cursor.fetchone())
        finally:
            cursor.execute("SET TIME ZONE 'UTC'")
    assert zoned == utc_values[:4] + utc_values[6:]
    assert all(value.tzinfo is UTC for value in zoned)


def test_what_iso_parsing_refuses_fails_as_with_django_s_loader() -> None:
    for django_loader in (False, True):
        with pytest.raises(DataError):
            _read("SELECT 'infinity'::timestamptz", django_loader)


def test_a_model_s_timestamps_round_trip() -> None:
    queue = make_queue()
    share = make_share(queue, TeamFactory())
    at = datetime(2026, 3, 29, 1, 59, 59, 999999, tzinfo=timezone(timedelta(hours=2)))
    job = make_job(share, UserFactory(), submitted_at=at)
    job.refresh_from_db()
    assert job.submitted_at == at
    assert job.submitted_at.tzinfo is UTC


# Array elements in every shape that needs quoting: quotes, backslashes, both, braces,
# delimiters, spaces, the word NULL, the empty string, JSON text, non-ASCII, and nesting.
ELEMENTS = [
    'say "hi"',
    "back\\slash",
    '\\"both\\"',
    "{braces}",
    "a,b",
    " padded ",
    "NULL",
    "",
    '{"reason": "a \\"quoted\\" word", "n": [1, 2]}',
    "ünïcode ✓",
    None,
    "plain",
]


def test_arrays_are_sent_as_psycopg_sends_them() -> None:
    connection.ensure_connection()
    assert connection.connection.adapters.get_dumper(list, PyFormat.TEXT) is ListDumper
    ours = Transformer(connection.connection).get_dumper(ELEMENTS, PyFormat.TEXT)
    assert isinstance(ours, ListDumper)
    theirs = array.ListDumper(list)
    theirs.sub_dumper = ours.sub_dumper
    assert bytes(ours.dump(ELEMENTS)) == bytes(theirs.dump(ELEMENTS))
    nested = [ELEMENTS[:3], ELEMENTS[3:6]]
    assert bytes(ours.dump(nested)) == bytes(theirs.dump(nested))


def test_arrays_round_trip_through_the_server() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text[], %s::text[]", [ELEMENTS, [ELEMENTS[:2], ELEMENTS[2:4]]])
        flat, nested = cursor.fetchone()
    assert flat == ELEMENTS
    assert nested == [ELEMENTS[:2], ELEMENTS[2:4]]


def test_bulk_created_rows_keep_their_quoted_json() -> None:
    """``bulk_create`` sends each column as an array: an audit-like JSON payload with
    quotes and backslashes arrives intact."""
    queue = make_queue()
    share = make_share(queue, TeamFactory())
    user = UserFactory()

    names = ['a "quoted" name', "back\\slash", "{x,y}"]
    Job.objects.bulk_create(
        Job(
            queue=queue,
            share=share,
            submitter=user,
            name=name,
            preferences=[{"instance_type": "ml.g5.xlarge", "count": 1, "note": name}],
            submitted_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        for name in names
    )
    stored = list(Job.objects.order_by("pk").values_list("name", "preferences"))
    assert [name for name, _ in stored] == names
    assert [prefs[0]["note"] for _, prefs in stored] == names
