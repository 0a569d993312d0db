"""Estimated starts as the pages show them, each job's first one recorded.

The forecast is a reading (``readings.forecast_queue``: the engine played forward on a
copy of the live state); the first estimate a job gets is kept
(``services.insight.forecasts_record_first``, a measurement with no audit entry) so the
forecast error can be measured once the job starts (docs/insight.md). The write lives
here, beside the reading it measures, so governance's selectors only read
(``tests/test_architecture.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from governance.services import insight
from scheduler import readings


def forecast_and_record_first(
    queue_id: int,
) -> tuple[dict[int, dict[str, Any]], str, float | None]:
    """``readings.forecast_queue``'s answer, the jobs' first estimates recorded."""
    forecasts, basis, valid_for = readings.forecast_queue(queue_id)
    insight.forecasts_record_first(
        queue_id=queue_id,
        estimates={
            pk: (datetime.fromtimestamp(f["estimated_start"], tz=UTC), f["position"])
            for pk, f in forecasts.items()
            if f["estimated_start"] is not None
        },
        basis=basis,
        now=datetime.now(tz=UTC),
    )
    return forecasts, basis, valid_for
