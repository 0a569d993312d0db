"""Forecast benchmark: the engine played forward on a busy queue.

    .venv/bin/python bench/forecast.py [--pending N ...]

The busy queue of ``bench/engine.py`` (``cycle_state``: 5,000 running jobs over 20
shares and 5 types, reached by the rules) plus N pending jobs, each given a duration
(lognormal, mean about two hours of work); every running job ends at a random moment
in the next eight hours. Times in milliseconds, as the live bridge counts. Prints, per
backlog, the time ``scheduler.engine.forecast.play_forward`` takes (what a queue page
pays once per stored state, before the answer is cached), how many pending jobs got an
estimate and whether playback stopped at a bound: exact, with finishes rounded to about
1% of the time ahead, and rounded within the live time budget. No database.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.engine import cycle_state
from scheduler.engine import JobState
from scheduler.engine.forecast import (
    FORECAST_BUDGET_SECONDS,
    FORECAST_HORIZON_SECONDS,
    FORECAST_MAX_STEPS,
    FORECAST_MIN_STEP_MS,
    FORECAST_RELATIVE,
    play_forward,
)

HOUR_MS = 3_600_000


def run(pending: int, coarse: bool, budget: float | None, seed: int = 5) -> None:
    rng = random.Random(seed)
    engine = cycle_state(pending, 5000)
    now = 1000
    finish_at: dict[str, int | None] = {}
    for job in engine.jobs():
        if job.state is JobState.RUNNING:
            finish_at[job.id] = now + rng.randint(1, 8 * HOUR_MS)
        else:
            job.duration = int(rng.lognormvariate(8.6, 0.8) * 1000)  # ~2 h mean, in ms
    engine.schedule(now)
    start = time.perf_counter()
    forecast = play_forward(
        engine,
        now,
        finish_at,
        horizon=FORECAST_HORIZON_SECONDS * 1000,
        max_steps=FORECAST_MAX_STEPS,
        relative=FORECAST_RELATIVE if coarse else None,
        min_step=FORECAST_MIN_STEP_MS,
        budget=budget,
    )
    elapsed = time.perf_counter() - start
    waiting = len(forecast.position)
    print(
        f"  {pending:>6} pending, 5000 running, {'rounded' if coarse else 'exact  '}, "
        f"budget {budget or '-':>4}: "
        f"{elapsed * 1000:8.0f} ms; "
        f"{len(forecast.starts):>6} of {waiting} estimated; "
        f"stopped at a bound: {'yes' if forecast.stopped_at is not None else 'no'}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pending", type=int, action="append")
    args = parser.parse_args()
    print("forecast playback (scheduler.engine.forecast.play_forward)")
    for pending in args.pending or [100, 1000, 10_000]:
        run(pending, False, None)
        run(pending, True, None)
        run(pending, True, FORECAST_BUDGET_SECONDS)  # as the live reading runs it


if __name__ == "__main__":
    main()
