"""Reads of the insight measurements: the forecast error and the usage history.

Plain database reads (no engine): the forecasts were recorded by
``selectors.scheduling.forecast_jobs`` and the rollups by the scheduling cycle, so the
Signals work and the pages can use them without playing anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from governance.models import InstanceType, Job, JobForecast, UsageRollup

_FORECAST_ERROR_SQL = """
SELECT {group} count(*),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY e),
       percentile_disc(0.9) WITHIN GROUP (ORDER BY e),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY s)
FROM (
  SELECT f.queue_id, abs(extract(epoch FROM j.started_at - f.estimated_start)) AS e,
         extract(epoch FROM j.started_at - f.estimated_start) AS s
  FROM {forecast} f JOIN {job} j ON j.id = f.job_id
  WHERE j.started_at IS NOT NULL {where}
) AS errors
{group_by}
"""


def forecast_error(
    *,
    queue_id: int | None = None,
    share_ids: Iterable[int] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> dict[str, Any]:
    """How far first estimates were from the actual first starts, in seconds, over jobs
    whose first start falls in ``[since, until)``: ``jobs`` (how many), ``p50`` and
    ``p90`` of the absolute error, and ``late_p50``, the median signed error (positive:
    jobs started later than estimated). Percentiles by nearest rank (docs/signals.md,
    ``percentile_disc``); None when no job qualifies."""
    where: list[str] = []
    params: dict[str, Any] = {}
    if queue_id is not None:
        where.append("f.queue_id = %(queue)s")
        params["queue"] = queue_id
    if share_ids is not None:
        where.append("f.share_id = ANY(%(shares)s)")
        params["shares"] = list(share_ids)
    if since is not None:
        where.append("j.started_at >= %(since)s")
        params["since"] = since
    if until is not None:
        where.append("j.started_at < %(until)s")
        params["until"] = until
    sql = _FORECAST_ERROR_SQL.format(
        forecast=JobForecast._meta.db_table,
        job=Job._meta.db_table,
        where="".join(f" AND {w}" for w in where),
        group="",
        group_by="",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return _error_figures(*cursor.fetchone())


def forecast_error_by_queue(*, since: datetime) -> dict[int, dict[str, Any]]:
    """``forecast_error`` of every queue at once (one query), for jobs first started
    from ``since`` on: queue id -> figures; queues with no such job are absent."""
    sql = _FORECAST_ERROR_SQL.format(
        forecast=JobForecast._meta.db_table,
        job=Job._meta.db_table,
        where=" AND j.started_at >= %(since)s",
        group="queue_id,",
        group_by="GROUP BY queue_id",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {"since": since})
        return {row[0]: _error_figures(*row[1:]) for row in cursor.fetchall()}


def _error_figures(count: Any, p50: Any, p90: Any, late: Any) -> dict[str, Any]:
    def num(value: Any) -> float | None:
        return float(value) if value is not None else None

    return {"jobs": int(count), "p50": num(p50), "p90": num(p90), "late_p50": num(late)}


# Usage history. Each window reads the rollups of one width, its step, so a chart has
# 60 to 120 points whatever the window and reads as many rows per series: the last hour
# per minute, the last day per quarter hour, the last 30 days per six hours.
@dataclass(frozen=True)
class Window:
    key: str
    label: str
    seconds: int
    width: int
    step: int


WINDOWS = {
    w.key: w
    for w in (
        Window("hour", "last hour", 3600, UsageRollup.MINUTE, 60),
        Window("day", "last day", 86400, UsageRollup.QUARTER, 900),
        Window("30d", "last 30 days", 30 * 86400, UsageRollup.SIX_HOURS, 6 * 3600),
    )
}
DEFAULT_WINDOW = "day"
FIGURES = ("own", "borrowed", "lent", "idle")

_HISTORY_SQL = """
SELECT t.name,
       floor(extract(epoch FROM r.start) / %(step)s)::bigint * %(step)s AS bucket,
       sum(r.own), sum(r.borrowed), sum(r.lent), sum(r.idle)
FROM {rollup} r JOIN {itype} t ON t.id = r.instance_type_id
WHERE r.width = %(width)s AND r.start >= %(begin)s AND r.start < %(end)s {where}
GROUP BY 1, 2
"""


def window(key: str | None) -> Window:
    """The named window, or the default one for anything else (a bounded input)."""
    return WINDOWS.get(key or "", WINDOWS[DEFAULT_WINDOW])


def usage_history(
    *,
    queue_id: int | None,
    window_key: str | None = None,
    share_ids: Iterable[int] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Own, borrowed, lent and idle instances per type over a window, as averages per
    step (instance-seconds of the step / its length so far), from the rollups the cycle
    writes; summed over ``share_ids`` (None: every share of the queue; ``queue_id``
    None: every queue). One query.

    Returns ``{"window", "label", "step", "begin", "end", "types": [{"name",
    "points": [{"at", "own", "borrowed", "lent", "idle"}], "hours": {figure:
    instance-hours over the window}}]}``. Types with nothing recorded are left out.
    """
    win = window(window_key)
    now = now or timezone.now()
    end_s = int(now.timestamp()) // win.step * win.step + win.step
    begin_s = end_s - win.seconds
    begin = datetime.fromtimestamp(begin_s, tz=UTC)
    end = datetime.fromtimestamp(end_s, tz=UTC)
    params: dict[str, Any] = {
        "step": win.step,
        "queue": queue_id,
        "width": win.width,
        "begin": begin,
        "end": end,
    }
    where = ""
    if queue_id is not None:
        where += " AND r.queue_id = %(queue)s"
    if share_ids is not None:
        where += " AND r.share_id = ANY(%(shares)s)"
        params["shares"] = list(share_ids)
    sql = _HISTORY_SQL.format(
        rollup=UsageRollup._meta.db_table, itype=InstanceType._meta.db_table, where=where
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    sums: dict[str, dict[int, tuple[float, ...]]] = {}
    for type_name, bucket, *values in rows:
        sums.setdefault(type_name, {})[int(bucket)] = tuple(float(v) for v in values)
    now_s = now.timestamp()
    types = []
    for type_name in sorted(sums):
        points = []
        totals = [0.0, 0.0, 0.0, 0.0]
        for bucket in range(begin_s, end_s, win.step):
            values = sums[type_name].get(bucket, (0.0, 0.0, 0.0, 0.0))
            # The step in progress is averaged over the part of it that has passed.
            length = max(1.0, min(float(win.step), now_s - bucket))
            point: dict[str, Any] = {"at": datetime.fromtimestamp(bucket, tz=UTC)}
            for index, name in enumerate(FIGURES):
                point[name] = values[index] / length
                totals[index] += values[index]
            points.append(point)
        types.append(
            {
                "name": type_name,
                "points": points,
                "hours": {name: totals[i] / 3600 for i, name in enumerate(FIGURES)},
            }
        )
    return {
        "window": win.key,
        "label": win.label,
        "step": win.step,
        "begin": begin,
        "end": end,
        "types": types,
    }
