"""A fingerprint of a queue's scheduling state, and a cache of answers derived from it.

The live regions (usage bars) and the reasons jobs wait are pure functions of stored
rows: the queues, their active (PENDING/RUNNING) jobs, shares, limits, capacity, capacity
plans (with whether each has started and ended: a plan's state changes with time alone),
instance types and teams. One query digests those rows' ids and ``xmin`` (PostgreSQL
gives every new row version a new ``xmin``, so any insert, update or delete changes the
digest). An answer cached under the digest is therefore never the answer for another
state, with no invalidation to forget in any service. The digest itself is kept for a
second under the queue's newest job event and audit entry (``queue_state_fingerprint``):
a change made through the services shows on the next poll, any other within a second.
The cache is Django's ``shared`` alias (Redis, one for all web workers); when it is
unavailable the answer is computed.

Single flight. When an answer is missing (a new state, or an answer that expired), the
clients reading it at that moment would all compute it at once: 20 clients of a page
whose engine readings take a second each queue up for 20 CPU-seconds (the team page's
p95 was 4 s). So the first to take the key's lock (``take_lock``, a ``cache.add`` that
expires after ``LOCK_SECONDS``) computes; the others wait for its answer
(``wait_for``, up to ``WAIT_SECONDS``, without using a CPU) or, where an answer of the
same state kept a little longer is there, serve that one meanwhile
(``selectors.scheduling``'s per-job readings). A lock that cannot be taken because the
cache is away counts as taken: the caller computes, as without a cache.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.db import connection
from django.db.models import Field, Model

from governance.models import (
    Agreement,
    AuditEntry,
    CapacityPlan,
    InstanceType,
    Job,
    JobEvent,
    JobQueue,
    Promise,
    QueueCapacity,
    Share,
    Team,
    UsageLevel,
    UsageRollup,
)
from governance.models.shares import ShareLimit

CACHE_ALIAS = "shared"
LOCK_SECONDS = 30
# How long a queue's state fingerprint is kept while nothing happens to its jobs or its
# policy (``queue_state_fingerprint``): the longest a write made without an event or an
# audit entry takes to show.
FINGERPRINT_SECONDS = 1
WAIT_SECONDS = 10.0
POLL_SECONDS = 0.05
T = TypeVar("T")

_FINGERPRINT_SQL = """
SELECT md5(concat_ws('|',
  (SELECT string_agg(id || ':' || xmin, ',' ORDER BY id) FROM {queue} WHERE {queue_filter}),
  (SELECT string_agg(id || ':' || xmin, ',' ORDER BY id) FROM {job}
    WHERE {queue_id_filter} AND state IN ('PENDING', 'RUNNING')),
  (SELECT string_agg(id || ':' || xmin, ',' ORDER BY id) FROM {share} WHERE {queue_id_filter}),
  (SELECT string_agg(l.id || ':' || l.xmin, ',' ORDER BY l.id) FROM {limit} l
    JOIN {share} s ON s.id = l.share_id WHERE {share_queue_filter}),
  (SELECT string_agg(id || ':' || xmin, ',' ORDER BY id) FROM {capacity}
    WHERE {queue_id_filter}),
  (SELECT string_agg(id || ':' || xmin || ':' || (start <= now())::text || ("end" <= now())::text,
    ',' ORDER BY id) FROM {plan} WHERE {queue_id_filter}),
  (SELECT string_agg(id || ':' || xmin, ',' ORDER BY id) FROM {itype}),
  (SELECT string_agg(id || ':' || xmin, ',' ORDER BY id) FROM {team})
))
"""


def queue_state_fingerprint(queue_id: int | None = None) -> str:
    """A digest that changes whenever anything stored that the usage figures or the
    engine read for this queue (None: every queue) changes.

    The digest reads every active job's row (a heap visit each: 2 ms of PostgreSQL at
    1,000 active jobs, and it grows with the backlog), and every live region polled each
    2 s asks for it. So it is kept in the cache under the queue's ``queue_record_version``
    (two index reads) and the current ``FINGERPRINT_SECONDS`` window: what happened
    through the services (a submission, an admission, a start, a completion, a reclaim,
    any audited edit) shows at once, a write with neither an event nor an audit entry (a
    heartbeat's progress, an edit in Django's admin site, an event committed after a
    newer one) within ``FINGERPRINT_SECONDS``, the same as before on the next poll."""
    return fingerprint_under(queue_record_version(queue_id), queue_id)


def fingerprint_under(record: str, queue_id: int | None) -> str:
    """``queue_state_fingerprint(queue_id)`` where its ``queue_record_version`` is read
    (with a page's own version, in one query: ``record_version_sql``)."""
    key = f"queue-fingerprint:{record}:{int(time.time() // FINGERPRINT_SECONDS)}"
    found = cache_get_many([key]).get(key)
    if isinstance(found, str):
        return found
    with connection.cursor() as cursor:
        cursor.execute(_fingerprint_sql(queue_id), {"q": queue_id})
        row = cursor.fetchone()
    found = _fingerprint_of(queue_id, row[0] if row else "")
    cache_set_many({key: found}, FINGERPRINT_SECONDS + 1)
    return found


def queue_fingerprint_within(everything: str, queue_id: int) -> str:
    """``queue_state_fingerprint(queue_id)``, kept under ``everything`` (the fingerprint of
    every queue, ``queue_state_fingerprint()``): a queue's rows are among every queue's,
    so while that one holds, so does the queue's, and a page that has read it reads the
    queue's from the cache instead of asking PostgreSQL again."""
    key = f"queue-fingerprint:{everything}:{queue_id}"
    found = cache_get_many([key]).get(key)
    if isinstance(found, str):
        return found
    found = queue_state_fingerprint(queue_id)
    cache_set_many({key: found}, 600)
    return found


def _fingerprint_of(queue_id: int | None, digest: str | None) -> str:
    return f"{connection.settings_dict['NAME']}:{queue_id}:{digest or ''}"


def _fingerprint_sql(queue_id: int | None) -> str:
    return _FINGERPRINT_SQL.format(
        queue=JobQueue._meta.db_table,
        job=Job._meta.db_table,
        share=Share._meta.db_table,
        limit=ShareLimit._meta.db_table,
        capacity=QueueCapacity._meta.db_table,
        itype=InstanceType._meta.db_table,
        plan=CapacityPlan._meta.db_table,
        team=Team._meta.db_table,
        queue_filter="id = %(q)s" if queue_id is not None else "TRUE",
        queue_id_filter="queue_id = %(q)s" if queue_id is not None else "TRUE",
        share_queue_filter="s.queue_id = %(q)s" if queue_id is not None else "TRUE",
    )


_RECORD_VERSION_SQL = """
  (SELECT e.id FROM {event} e JOIN {job} j ON j.id = e.job_id WHERE {queue_filter}
    ORDER BY e.id DESC LIMIT 1),
  (SELECT max(id) FROM {audit})
"""


def queue_record_version(queue_id: int | None = None) -> str:
    """The newest job event of this queue's jobs (None: of every queue's) and the newest
    audit entry: a version of what a window's figures are computed from (its jobs'
    events, and the policy in force, every change of which is audited: shares, limits,
    capacity, plans, instance types, decisions, certifications). Unlike
    ``queue_state_fingerprint`` it does not change while jobs only run (a heartbeat
    rewrites the job's row, not its events), so an answer kept under it is computed
    again after something happened (a submission, a start, a reclaim, an edit), not
    at every heartbeat. Two index reads in one query."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_record_version_sql(queue_id)}", {"q": queue_id})
        row = cursor.fetchone()
    return record_version_of(queue_id, *(row or (None, None)))


def queue_fingerprint_and_record_version(queue_id: int) -> tuple[str, str]:
    """``queue_state_fingerprint`` and ``queue_record_version`` of a queue (a share's
    ledger page keeps its "now" under the one, its window under the other): one query
    when the fingerprint is cached."""
    record = queue_record_version(queue_id)
    return fingerprint_under(record, queue_id), record


def _record_version_sql(queue_id: int | None) -> str:
    return record_version_sql("%(q)s" if queue_id is not None else None)


def record_version_sql(queue_column: str | None) -> str:
    """The two columns ``queue_record_version`` reads, for the queue whose id is
    ``queue_column`` (an outer query's column, not aliased ``j`` or ``e``; None: every
    queue), so a page reads them with its own version in one query and passes them to
    ``record_version_of``."""
    return _RECORD_VERSION_SQL.format(
        event=JobEvent._meta.db_table,
        job=Job._meta.db_table,
        audit=AuditEntry._meta.db_table,
        queue_filter=f"j.queue_id = {queue_column}" if queue_column is not None else "TRUE",
    )


def record_version_of(queue_id: int | None, event: int | None, audit: int | None) -> str:
    return f"{connection.settings_dict['NAME']}:{queue_id}:{event}:{audit}"


def cache_get_many(keys: list[str]) -> dict[str, Any]:
    try:
        found: dict[str, Any] = caches[CACHE_ALIAS].get_many(keys)
    except Exception:  # an optimisation only: without the cache, compute
        return {}
    return found


def cache_set_many(values: dict[str, Any], timeout: float) -> None:
    with contextlib.suppress(Exception):  # not cached this time
        caches[CACHE_ALIAS].set_many(values, timeout)


def take_lock(key: str, seconds: float = LOCK_SECONDS) -> str | None:
    """A token when this caller now holds the lock ``key`` (or the cache is away: then
    everyone computes); None when another caller holds it."""
    token = uuid.uuid4().hex
    try:
        if caches[CACHE_ALIAS].add(key, token, seconds):
            return token
        held = caches[CACHE_ALIAS].get(key)
    except Exception:
        return token
    return None if held is not None else token


def release_lock(key: str, token: str) -> None:
    """Release the lock ``key`` if this caller (``token``) still holds it."""
    with contextlib.suppress(Exception):  # it expires by itself
        if caches[CACHE_ALIAS].get(key) == token:
            caches[CACHE_ALIAS].delete_many([key])  # a cache entry, not a row


def wait_for(keys: list[str], ready: str, seconds: float | None = None) -> dict[str, Any]:
    """``cache_get_many(keys)`` once ``ready`` (one of them) is there, polling while another
    caller computes it; what is there after ``seconds`` (``WAIT_SECONDS``) otherwise."""
    return wait_until(keys, lambda found: ready in found, seconds)


def wait_until(
    keys: list[str], done: Callable[[dict[str, Any]], bool], seconds: float | None = None
) -> dict[str, Any]:
    """``cache_get_many(keys)`` once ``done`` says so of it, polling while another caller
    computes it (without using a CPU); what is there after ``seconds`` (``WAIT_SECONDS``)
    otherwise."""
    deadline = time.monotonic() + (WAIT_SECONDS if seconds is None else seconds)
    pause = POLL_SECONDS / 8  # most answers take milliseconds: look again soon, then less often
    while True:
        found = cache_get_many(keys)
        if done(found) or time.monotonic() >= deadline:
            return found
        time.sleep(pause)
        pause = min(POLL_SECONDS, pause * 2)


def cached(key: str, compute: Callable[[], T], timeout: float = 60.0) -> T:
    """``compute()`` cached under ``key`` (which must name the state it depends on),
    computed by one caller at a time (single flight: the others wait for its answer)."""
    found = cache_get_many([key])
    if key in found:
        value: T = found[key]
        return value
    token = take_lock(f"{key}:lock")
    if token is None:
        found = wait_for([key], key)
        if key in found:
            value = found[key]
            return value
    try:
        value = compute()
        cache_set_many({key: value}, timeout)
    finally:
        if token is not None:
            release_lock(f"{key}:lock", token)
    return value


def _column(model: type[Model], name: str) -> str:
    field = model._meta.get_field(name)
    column = field.column if isinstance(field, Field) else None
    assert column is not None, f"{model.__name__}.{name} is no column"
    return column


def rows_version(model: type[Model], column: str, value: Any, **equal: Any) -> str:
    """A digest of the ids, ``xmin`` and ``ctid`` of ``model``'s rows whose ``column`` is
    ``value`` (and each of ``equal``'s columns its value): it changes with any insert,
    update or delete among them, including the writes made without an audit entry (a
    certification's drift mark, a promise's evaluation, a decision's reminder), which
    ``queue_record_version`` does not see. ``ctid`` (where the row version lies) tells
    apart two versions written by one transaction, which share their ``xmin``. For a few
    rows (one workload's certifications, one team's open decisions): one index read."""
    table = model._meta.db_table
    where = " AND ".join(f'"{_column(model, name)}" = %s' for name in (column, *equal))
    sql = (
        "SELECT md5(coalesce(string_agg(id || ':' || xmin || ':' || ctid::text, ',' "
        f"ORDER BY id), '')) FROM \"{table}\" WHERE {where}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value, *equal.values()])
        row = cursor.fetchone()
    return f"{table}:{value}:{row[0] if row else ''}"


# A digest of a small table's rows (ordered by their own text: deterministic).
_ROWS_DIGEST = (
    "(SELECT md5(coalesce(string_agg(v, ',' ORDER BY v), '')) FROM "
    "(SELECT {columns} AS v FROM {table}) AS rows)"
)
PAGE_VERSION_COLUMNS = 5  # the columns of ``page_version_sql``


def page_version() -> str:
    """What a cached page fragment (``web.fragments``) shows of the stored state besides
    its own parts, in one query: ``queue_record_version()`` (every job change writes an
    event, every policy change, filing, decision and review an audit entry); a digest of
    the promises' and agreements' rows (an evaluation rewrites its promise's state, the
    "broken" marks several pages show, without an audit entry; a few rows a site); and
    of the users' names, which Django's admin site may change without an audit entry."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {page_version_sql()}")
        row = cursor.fetchone()
    return page_version_of(row or (None,) * PAGE_VERSION_COLUMNS)


def page_version_sql() -> str:
    """The ``PAGE_VERSION_COLUMNS`` columns ``page_version`` reads (no parameter), for a
    view that reads them with its own version in one query and passes them to
    ``page_version_of``."""
    user = get_user_model()
    versions = "id || ':' || xmin || ':' || ctid::text"
    return ", ".join(
        (
            record_version_sql(None).strip(),
            _ROWS_DIGEST.format(columns=versions, table=Promise._meta.db_table),
            _ROWS_DIGEST.format(columns=versions, table=Agreement._meta.db_table),
            _ROWS_DIGEST.format(
                columns=f"id || ':' || {_column(user, user.USERNAME_FIELD)}",
                table=user._meta.db_table,
            ),
        )
    )


def page_version_of(columns: Sequence[Any]) -> str:
    """``page_version`` from the columns ``page_version_sql`` read."""
    event, audit, *digests = columns
    return ":".join([record_version_of(None, event, audit), *map(str, digests)])


def usage_history_version() -> str:
    """A version of the usage rollups the history charts are drawn from: each cycle adds
    to them in place with no event, in the transaction that rewrites its queue's
    ``UsageLevel`` row (a digest of those rows, one a queue), and a rebuild inserts new
    rows (the newest id). One query."""
    sql = (
        _ROWS_DIGEST.format(
            columns=f"{UsageLevel._meta.pk.column} || ':' || xmin || ':' || ctid::text",
            table=UsageLevel._meta.db_table,
        )
        + f", (SELECT max(id) FROM {UsageRollup._meta.db_table})"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}")
        row = cursor.fetchone()
    return ":".join(map(str, row or ()))


def table_version(model: type[Model]) -> str:
    """A digest of every row of a small table (ids, ``xmin``, ``ctid``): changes with any
    write to it, audited or not (the priority bands: a handful of rows). One query."""
    columns = f"{model._meta.pk.column} || ':' || xmin || ':' || ctid::text"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_ROWS_DIGEST.format(columns=columns, table=model._meta.db_table)}")
        row = cursor.fetchone()
    return f"{model._meta.db_table}:{row[0] if row else ''}"
