"""Writers of the measurements behind the insight figures: a pending job's first start
forecast, and the per-minute and per-hour usage rollups the cycle writes.

These are records of what was observed, not decisions: no actor, no audit entry (the
audit trail keeps the decisions themselves, and the rollups are derived from the same
accounting function the decisions used).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.db import connection, transaction
from django.db.models import Field

from governance import prepared
from governance.models import (
    Job,
    JobEvent,
    JobForecast,
    JobQueue,
    JobState,
    UsageLevel,
    UsageRollup,
)
from governance.selectors.rows import built, columns, table

# Minute and quarter-hour rollups are kept this long (the hour and day charts need no
# more); six-hour ones are kept.
SHORT_RETENTION = timedelta(days=2)
# A gap longer than this between two cycles of a queue (the scheduler was down) is not
# filled in: nobody knows what ran then.
MAX_GAP = timedelta(hours=6)
WIDTHS = (UsageRollup.MINUTE, UsageRollup.QUARTER, UsageRollup.SIX_HOURS)


def forecasts_record_first(
    *, queue_id: int, estimates: dict[int, tuple[datetime, int]], basis: str, now: datetime
) -> int:
    """Record ``estimates`` (job id -> (estimated start, position)) for pending jobs of
    the queue that have none yet; a job's first estimate is kept, later ones are not.
    Returns how many were recorded."""
    if not estimates:
        return 0
    known = set(JobForecast.objects.filter(job_id__in=estimates).values_list("job_id", flat=True))
    missing = [pk for pk in estimates if pk not in known]
    if not missing:
        return 0
    shares = dict(
        Job.objects.filter(pk__in=missing, state=JobState.PENDING, queue_id=queue_id).values_list(
            "pk", "share_id"
        )
    )
    rows = [
        JobForecast(
            job_id=pk,
            queue_id=queue_id,
            share_id=shares[pk],
            estimated_at=now,
            estimated_start=estimates[pk][0],
            position=estimates[pk][1],
            basis=basis[:300],
        )
        for pk in missing
        if pk in shares
    ]
    JobForecast.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


@dataclass(frozen=True)
class Level:
    """One share on one type as the accounting function counts it at a moment."""

    share_id: int
    instance_type_id: int
    own: int
    borrowed: int
    lent: int
    idle: int


def bucket_start(moment: datetime, width: int) -> datetime:
    seconds = int(moment.timestamp()) // width * width
    return datetime.fromtimestamp(seconds, tz=UTC)


def spread(
    levels: Iterable[Level], since: datetime, until: datetime, widths: Sequence[int] = WIDTHS
) -> dict[tuple[int, int, int, datetime], list[float]]:
    """Instance-seconds of ``levels`` held over ``[since, until)``, cut into buckets of
    each width: (share, type, width, bucket start) -> [own, borrowed, lent, idle]."""
    out: dict[tuple[int, int, int, datetime], list[float]] = {}
    levels = [lv for lv in levels if lv.own or lv.borrowed or lv.lent or lv.idle]
    if until <= since or not levels:
        return out
    for width in widths:
        start = bucket_start(since, width)
        while start < until:
            end = start + timedelta(seconds=width)
            seconds = (min(end, until) - max(start, since)).total_seconds()
            if seconds > 0:
                for lv in levels:
                    values = out.setdefault(
                        (lv.share_id, lv.instance_type_id, width, start), [0.0, 0.0, 0.0, 0.0]
                    )
                    values[0] += lv.own * seconds
                    values[1] += lv.borrowed * seconds
                    values[2] += lv.lent * seconds
                    values[3] += lv.idle * seconds
            start = end
    return out


# The rows come as one array per column, so the statement is the same short text however
# many rows it writes: a VALUES list of a placeholder per value made the rebuild of a
# long history one statement of a megabyte, which psycopg scanned for its placeholders
# in Python (0.65 s per statement; the demo's first start ran three).
_UPSERT = """
INSERT INTO {table} (queue_id, share_id, instance_type_id, width, start, own, borrowed, lent, idle)
SELECT %s, * FROM unnest(
  %s::bigint[], %s::bigint[], %s::integer[], %s::timestamptz[],
  %s::float8[], %s::float8[], %s::float8[], %s::float8[]
)
ON CONFLICT (share_id, instance_type_id, width, start) DO UPDATE SET
  own = {table}.own + EXCLUDED.own,
  borrowed = {table}.borrowed + EXCLUDED.borrowed,
  lent = {table}.lent + EXCLUDED.lent,
  idle = {table}.idle + EXCLUDED.idle
"""


def rollups_add(queue_id: int, buckets: dict[tuple[int, int, int, datetime], list[float]]) -> None:
    """Add ``buckets`` (as ``spread`` gives them) to the stored rollups: one statement,
    its rows in key order (two writers of overlapping rows lock them in one order)."""
    if not buckets:
        return
    keys, values = zip(*sorted(buckets.items()), strict=True)
    columns = [list(column) for column in (*zip(*keys, strict=True), *zip(*values, strict=True))]
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT.format(table=UsageRollup._meta.db_table), [queue_id, *columns])


def usage_record(*, queue_id: int, levels: Sequence[Level], now: datetime) -> None:
    """The cycle's write: credit the levels the previous cycle left over the time since
    it, then keep ``levels`` (what this cycle leaves running) for the next one.

    The credit waits in ``UsageLevel.pending`` while cycles stay within one minute; the
    first cycle of a new minute adds it all to the rollups (one statement), so the
    history lags the cycle by at most a minute. The history row is locked while it is
    read and written, and a record for a moment before the last one is skipped, so two
    cycles of one queue never credit the same interval twice (a cycle's transaction
    records it; the slurm executor records it just after, once it has submitted).
    """
    with transaction.atomic():
        previous = _locked_level(queue_id)
        rows = [
            [lv.share_id, lv.instance_type_id, lv.own, lv.borrowed, lv.lent, lv.idle]
            for lv in levels
        ]
        if previous is None:
            UsageLevel.objects.create(queue_id=queue_id, since=now, levels=rows)
            return
        last = previous.since
        if now < last:
            return  # a cycle for an earlier moment (clock skew between workers): skip
        # Only shares and types that still exist: one deleted since the last cycle takes
        # its rollups with it (cascade) and must not fail this cycle's insert.
        known = {(lv.share_id, lv.instance_type_id) for lv in levels}
        buckets = {
            (share, itype, width, datetime.fromtimestamp(start, tz=UTC)): list(values)
            for share, itype, width, start, *values in previous.pending
            if (share, itype) in known
        }
        if now > last:
            since = max(last, now - MAX_GAP)
            old = [Level(*row) for row in previous.levels if (row[0], row[1]) in known]
            for key, values in spread(old, since, now).items():
                into = buckets.setdefault(key, [0.0, 0.0, 0.0, 0.0])
                for i in range(4):
                    into[i] += values[i]
        if bucket_start(last, UsageRollup.MINUTE) != bucket_start(now, UsageRollup.MINUTE):
            rollups_add(queue_id, buckets)
            buckets = {}
        previous.since = now
        previous.levels = rows
        previous.pending = [
            [share, itype, width, int(start.timestamp()), *values]
            for (share, itype, width, start), values in sorted(buckets.items())
        ]
        _save_level(previous)
        # Old short rows go once an hour (the first cycle of each hour), in one statement.
        if bucket_start(last, 3600) != bucket_start(now, 3600):
            UsageRollup.objects.filter(
                queue_id=queue_id,
                width__in=(UsageRollup.MINUTE, UsageRollup.QUARTER),
                start__lt=now - SHORT_RETENTION,
            ).delete()


# A cycle's read and write of its queue's levels, prepared once per connection
# (``governance.prepared``): the ORM compiled both at every cycle, and with the savepoint
# around them they were a tenth of a busy worker's CPU (``py-spy --gil``).
_LOCK_LEVEL = (
    f"SELECT {columns(UsageLevel, 'u')} FROM {table(UsageLevel)} u WHERE u.queue_id = %s FOR UPDATE"
)
_SAVE_LEVEL = (
    f"UPDATE {table(UsageLevel)} SET since = %s, levels = %s, pending = %s WHERE queue_id = %s"
)


def _locked_level(queue_id: int) -> UsageLevel | None:
    """The queue's levels, their row locked; None before its first cycle."""
    with prepared.cursor() as cursor:
        cursor.execute(_LOCK_LEVEL, [queue_id])
        row = cursor.fetchone()
    return None if row is None else built(UsageLevel, row)


def _save_level(level: UsageLevel) -> None:
    """Write ``since``, ``levels`` and ``pending``, as ``save(update_fields=...)``."""
    fields = [UsageLevel._meta.get_field(name) for name in ("since", "levels", "pending")]
    values = [
        cast("Field[Any, Any]", field).get_db_prep_save(getattr(level, field.name), connection)
        for field in fields
    ]
    with prepared.cursor() as cursor:
        cursor.execute(_SAVE_LEVEL, [*values, level.queue_id])


# Rebuilding the rollups from the recorded job events: for a queue whose history was
# recorded before rollups existed, or whose rollups were lost. A run lasts from a job's
# ``admitted`` event to its next run-ending event.
RUN_ENDS = frozenset({"preempted", "completed", "failed", "cancelled", "lost"})


def usage_rebuild(*, queue_id: int, since: datetime, until: datetime) -> int:
    """Recompute the queue's rollups over ``[since, until)`` from its jobs' recorded
    events and write them in place of what was there; returns the rows written.

    ``since`` is taken back to the start of its six-hour bucket, and ``until`` is
    capped at the moment the live cycle has credited to (``UsageLevel.since``): what
    lies after stays with the cycle (its pending credit, before that moment, is
    replaced too). Minute and quarter-hour rows are rebuilt only
    within their retention. Limits, policies and capacity are the queue's current ones
    (changes over time are not replayed), so own, borrowed, lent and idle are those the
    accounting function gives for the recorded usage under today's configuration.
    Nothing is credited before the queue's first recorded job event.
    """
    with transaction.atomic():
        # The queue's row first, as a cycle takes it (scheduler/cycle/run.py), so a rebuild
        # and a cycle that credits usage queue behind each other instead of deadlocking:
        # the rollups' foreign key needs a share lock on that row while the cycle holds it
        # for update.
        JobQueue.objects.select_for_update().filter(pk=queue_id).first()
        level = UsageLevel.objects.select_for_update().filter(queue_id=queue_id).first()
        if level is not None:
            until = min(until, level.since)
        since = bucket_start(since, UsageRollup.SIX_HOURS)
        first = (
            JobEvent.objects.filter(job__queue_id=queue_id)
            .order_by("at")
            .values_list("at", flat=True)
            .first()
        )
        if until <= since or first is None:
            return 0
        # Nothing is credited before the queue's first recorded event (idle entitlement
        # of a queue nobody used yet is not history); rows are replaced from ``since``.
        buckets = _replay_usage(queue_id, max(since, first), until)
        UsageRollup.objects.filter(queue_id=queue_id, start__gte=since, start__lt=until).delete()
        rollups_add(queue_id, buckets)
        if level is not None and level.pending:
            # The credit the cycle kept pending lies before ``until``: rebuilt above.
            level.pending = []
            level.save(update_fields=["pending"])
        return len(buckets)


def _usage_changes(
    queue_id: int, until: datetime, type_ids: Mapping[str, int]
) -> dict[datetime, list[tuple[int, str, int]]]:
    """Usage changes per instant from the recorded runs before ``until``: (share, type)
    +count at an admission, -count at its end."""
    changes: dict[datetime, list[tuple[int, str, int]]] = {}
    open_runs: dict[int, tuple[int, str, int]] = {}
    events = (
        JobEvent.objects.filter(
            job__queue_id=queue_id, at__lt=until, type__in={"admitted", *RUN_ENDS}
        )
        .order_by("at", "id")
        .values_list("job_id", "job__share_id", "at", "type", "data")
    )
    for job_id, share_id, at, kind, data in events.iterator(chunk_size=5000):
        if kind == "admitted":
            name, count = str(data.get("instance_type")), int(data.get("count") or 0)
            if name not in type_ids or job_id in open_runs:
                continue
            open_runs[job_id] = (share_id, name, count)
            changes.setdefault(at, []).append((share_id, name, count))
        elif job_id in open_runs:
            share_id, name, count = open_runs.pop(job_id)
            changes.setdefault(at, []).append((share_id, name, -count))
    return changes


def _replay_usage(
    queue_id: int, since: datetime, until: datetime
) -> dict[tuple[int, int, int, datetime], list[float]]:
    """The rollups of ``[since, until)`` from the recorded runs (see ``usage_rebuild``)."""
    from governance.models import QueueCapacity, Share
    from scheduler.engine.accounting import ShareOnType, account_type

    shares = list(Share.objects.filter(queue_id=queue_id).prefetch_related("limits__instance_type"))
    shares.sort(key=lambda s: s.name)  # lenders in name order, as the usage bars
    limits = {s.pk: {lim.instance_type.name: lim.count for lim in s.limits.all()} for s in shares}
    capacity: dict[str, int] = {}
    type_ids: dict[str, int] = {}
    for name, type_id, count in QueueCapacity.objects.filter(queue_id=queue_id).values_list(
        "instance_type__name", "instance_type_id", "count"
    ):
        capacity[name] = count
        type_ids[name] = type_id
    for share in shares:
        for lim in share.limits.all():
            type_ids.setdefault(lim.instance_type.name, lim.instance_type_id)

    changes = _usage_changes(queue_id, until, type_ids)

    usage: dict[tuple[int, str], int] = {}
    levels: dict[str, list[Level]] = {name: [] for name in type_ids}
    last: dict[str, datetime] = dict.fromkeys(type_ids, since)
    short_from = max(since, until - SHORT_RETENTION)
    out: dict[tuple[int, int, int, datetime], list[float]] = {}

    def credit(name: str, moment: datetime) -> None:
        begin, end = max(last[name], since), min(moment, until)
        if end > begin and levels[name]:
            part = spread(levels[name], begin, end, (UsageRollup.SIX_HOURS,))
            if end > short_from:
                short = (UsageRollup.MINUTE, UsageRollup.QUARTER)
                part.update(spread(levels[name], max(begin, short_from), end, short))
            for key, values in part.items():
                into = out.setdefault(key, [0.0, 0.0, 0.0, 0.0])
                for i in range(4):
                    into[i] += values[i]
        last[name] = max(last[name], moment)

    def recount(name: str) -> None:
        account = account_type(
            capacity.get(name, 0),
            [
                ShareOnType(
                    key=s.pk,
                    policy=s.policy,
                    limit=limits[s.pk].get(name),
                    usage=usage.get((s.pk, name), 0),
                )
                for s in shares
            ],
        )
        levels[name] = [
            Level(row.key, type_ids[name], row.own, row.borrowed, row.lent, row.idle)
            for row in account.shares
        ]

    for name in type_ids:
        recount(name)
    for moment in sorted(changes):
        touched = set()
        for share_id, name, delta in changes[moment]:
            usage[(share_id, name)] = usage.get((share_id, name), 0) + delta
            touched.add(name)
        for name in sorted(touched):
            credit(name, moment)
            recount(name)
    for name in type_ids:
        credit(name, until)
    return out
