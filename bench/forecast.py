"""Forecast benchmark: the engine played forward on a busy queue, as things are and on
the shares' entitlements alone.

    .venv/bin/python bench/forecast.py [--pending N ...] [--only today|entitled]

The busy queue of ``bench/engine.py`` (``cycle_state``: 5,000 running jobs over 20
shares and 5 types, reached by the rules) plus N pending jobs, each given a duration
(lognormal, mean about two hours of work); every running job ends at a random moment
in the next eight hours. Times in milliseconds, as the live bridge counts. Prints, per
backlog, the time ``scheduler.engine.forecast.play_forward`` takes (what a queue page
pays once per stored state, before the answer is cached), how many pending jobs got an
estimate and whether playback stopped at a bound: exact, with finishes rounded to about
1% of the time ahead, and rounded within the live time budget. No database.

Both forecasts are measured: ``today`` (``play_forward``: the live forecast) and
``entitled`` (``play_entitled``: nobody lends, one playback giving every pending job its
start on its share's entitlement alone; its cost includes the cycles of the current
instant it replays without lending). Each is a separate playback, cached apart, so each
must stay within the live budget ``FORECAST_BUDGET_SECONDS`` on its own; the bench prints
that budget beside the figures.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.engine import cycle_state
from scheduler.engine import JobState
from scheduler.engine.forecast import (
    FORECAST_BUDGET_SECONDS,
    FORECAST_HORIZON_SECONDS,
    FORECAST_MAX_STEPS,
    FORECAST_MIN_STEP_MS,
    FORECAST_RELATIVE,
    play_entitled,
    play_forward,
)

HOUR_MS = 3_600_000


def _state(pending: int, seed: int) -> tuple[Any, dict[str, int | None]]:
    rng = random.Random(seed)
    engine = cycle_state(pending, 5000)
    finish_at: dict[str, int | None] = {}
    for job in engine.jobs():
        if job.state is JobState.RUNNING:
            finish_at[job.id] = NOW + rng.randint(1, 8 * HOUR_MS)
        else:
            job.duration = int(rng.lognormvariate(8.6, 0.8) * 1000)  # ~2 h mean, in ms
    return engine, finish_at


NOW = 1000


def run(variant: str, pending: int, coarse: bool, budget: float | None, seed: int = 5) -> None:
    engine, finish_at = _state(pending, seed)
    bounds: dict[str, Any] = {
        "horizon": FORECAST_HORIZON_SECONDS * 1000,
        "max_steps": FORECAST_MAX_STEPS,
        "relative": FORECAST_RELATIVE if coarse else None,
        "min_step": FORECAST_MIN_STEP_MS,
        "budget": budget,
    }
    start = time.perf_counter()
    if variant == "today":
        engine.schedule(NOW)  # the instant, played by the caller (not timed, as before)
        start = time.perf_counter()
        forecast = play_forward(engine, NOW, finish_at, **bounds)
    else:
        forecast = play_entitled(engine, NOW, finish_at, **bounds)
    elapsed = time.perf_counter() - start
    waiting = len(forecast.position)
    within = "-" if budget is None else ("yes" if elapsed <= budget * 1.1 else "NO")
    print(
        f"  {variant:<8} {pending:>6} pending, 5000 running, "
        f"{'rounded' if coarse else 'exact  '}, budget {budget or '-':>4}: "
        f"{elapsed * 1000:8.0f} ms (within budget: {within:>3}); "
        f"{len(forecast.starts):>6} of {waiting} estimated"
        + (f", {len(forecast.never)} never on their own entitlement" if forecast.entitled else "")
        + f"; stopped at a bound: {'yes' if forecast.stopped_at is not None else 'no'}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pending", type=int, action="append")
    parser.add_argument("--only", choices=["today", "entitled"])
    args = parser.parse_args()
    print(
        "forecast playback (scheduler.engine.forecast: play_forward as today, play_entitled "
        f"on the entitlements alone); live budget {FORECAST_BUDGET_SECONDS} s per playback"
    )
    variants = [args.only] if args.only else ["today", "entitled"]
    for pending in args.pending or [100, 1000, 10_000]:
        for variant in variants:
            run(variant, pending, False, None)
            run(variant, pending, True, None)
            run(variant, pending, True, FORECAST_BUDGET_SECONDS)  # as the live reading runs it


if __name__ == "__main__":
    main()
