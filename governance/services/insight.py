"""Writers of the measurements behind the insight figures: a pending job's first start
forecast, and the per-minute and per-hour usage rollups the cycle writes.

These are records of what was observed, not decisions: no actor, no audit entry (the
audit trail keeps the decisions themselves, and the rollups are derived from the same
accounting function the decisions used).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from governance.models import Job, JobForecast, JobState, UsageLevel, UsageRollup

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


_UPSERT = """
INSERT INTO {table} (queue_id, share_id, instance_type_id, width, start, own, borrowed, lent, idle)
VALUES {values}
ON CONFLICT (share_id, instance_type_id, width, start) DO UPDATE SET
  own = {table}.own + EXCLUDED.own,
  borrowed = {table}.borrowed + EXCLUDED.borrowed,
  lent = {table}.lent + EXCLUDED.lent,
  idle = {table}.idle + EXCLUDED.idle
"""


def rollups_add(queue_id: int, buckets: dict[tuple[int, int, int, datetime], list[float]]) -> None:
    """Add ``buckets`` (as ``spread`` gives them) to the stored rollups: one statement."""
    if not buckets:
        return
    params: list[Any] = []
    for (share_id, type_id, width, start), values in sorted(buckets.items()):
        params += [queue_id, share_id, type_id, width, start, *values]
    values_sql = ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(buckets))
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT.format(table=UsageRollup._meta.db_table, values=values_sql), params)


def usage_record(*, queue_id: int, levels: Sequence[Level], now: datetime) -> None:
    """The cycle's write: credit the levels the previous cycle left over the time since
    it, then keep ``levels`` (what this cycle leaves running) for the next one.

    The credit waits in ``UsageLevel.pending`` while cycles stay within one minute; the
    first cycle of a new minute adds it all to the rollups (one statement), so the
    history lags the cycle by at most a minute. Runs inside the cycle's transaction,
    which holds the queue's lock, so two cycles of one queue never credit the same
    interval twice.
    """
    with transaction.atomic():
        previous = UsageLevel.objects.select_for_update().filter(queue_id=queue_id).first()
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
        buckets = {
            (share, itype, width, datetime.fromtimestamp(start, tz=UTC)): list(values)
            for share, itype, width, start, *values in previous.pending
        }
        if now > last:
            since = max(last, now - MAX_GAP)
            old = [Level(*row) for row in previous.levels]
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
        previous.save(update_fields=["since", "levels", "pending"])
        # Old short rows go once an hour (the first cycle of each hour), in one statement.
        if bucket_start(last, 3600) != bucket_start(now, 3600):
            UsageRollup.objects.filter(
                queue_id=queue_id,
                width__in=(UsageRollup.MINUTE, UsageRollup.QUARTER),
                start__lt=now - SHORT_RETENTION,
            ).delete()
