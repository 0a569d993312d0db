"""Reads of the insight measurements: the forecast error and the usage history.

Plain database reads (no engine): the forecasts were recorded by
``selectors.scheduling.forecast_jobs`` and the rollups by the scheduling cycle, so the
Signals work and the pages can use them without playing anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection

from governance.models import Job, JobForecast

_FORECAST_ERROR_SQL = """
SELECT count(*),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY e),
       percentile_disc(0.9) WITHIN GROUP (ORDER BY e),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY s)
FROM (
  SELECT abs(extract(epoch FROM j.started_at - f.estimated_start)) AS e,
         extract(epoch FROM j.started_at - f.estimated_start) AS s
  FROM {forecast} f JOIN {job} j ON j.id = f.job_id
  WHERE j.started_at IS NOT NULL {where}
) AS errors
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
    jobs started later than estimated). Percentiles by nearest rank (DESIGN section 8,
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
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        count, p50, p90, late = cursor.fetchone()

    def num(value: Any) -> float | None:
        return float(value) if value is not None else None

    return {"jobs": int(count), "p50": num(p50), "p90": num(p90), "late_p50": num(late)}
