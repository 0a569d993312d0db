"""Drift of a certified configuration (docs/workloads.md#drift), written once for the
workload page, the leads' notification and the ``certification_drift`` signal: each run
completed on the configuration, its actual run time (last admission to completion) over
the certified run time; ``{p50, p90, runs}`` of those ratios (nearest rank), drifting when
p50 lies outside [1/1.2, 1.2] over at least 5 runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

TOLERANCE = 1.2
MIN_RUNS = 5


def nearest_rank(ordered: Sequence[float], pct: float) -> float | None:
    """The value at 1-based rank ceil(pct * N / 100) of values sorted ascending."""
    if not ordered:
        return None
    return ordered[max(1, math.ceil(pct * len(ordered) / 100)) - 1]


def drift(actual: Sequence[float], certified: float) -> dict[str, Any]:
    """``{p50, p90, runs, drifting}`` of the runs ``actual`` (run times) against the
    ``certified`` run time (same unit, > 0); p50 and p90 are None without runs."""
    ratios = sorted(a / certified for a in actual)
    p50 = nearest_rank(ratios, 50)
    return {
        "p50": p50,
        "p90": nearest_rank(ratios, 90),
        "runs": len(ratios),
        "drifting": p50 is not None
        and len(ratios) >= MIN_RUNS
        and not 1 / TOLERANCE <= p50 <= TOLERANCE,
    }
