"""Promises benchmark: every promise of 100 agreements over 30-day windows of a
100,000-job queue.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything .venv/bin/python bench/promises.py \\
        [--jobs N] [--agreements N] [--window-only]

The queue is ``bench/whatif.py``'s: the oversubscribed trace of ``bench/engine.py``
(100,000 jobs over 30 days at an offered load of 1.0) played through the engine and
written to a throwaway database ``bench_promises_<name>`` as the live scheduler would
have left it. Then 100 agreements each link a share of the queue and carry three
promises over the last 30 days (a wait percentile of the share, its goodput, and a
figure of its team), and the bench times what beat's daily pass does:
``services.promises.promises_evaluate`` for the 30-day window the jobs arrived in,
which reads the same signals ``/api/signals/`` answers and writes an evaluation
per promise. Target: under 10 s. Then the same evaluation again, its windows now answered
from the store of closed windows' signals (docs/signals.md#stored-answers), and the
30-day window's signals as the API answers them (``selectors.scheduling.queue_signals``):
cold (nothing stored, target at most 3 s) and from the store (median of 5, target at most
300 ms). Wall-clock on this machine, whatever else it runs; CPU time of this process too.
``--window-only`` writes the same history and times only the 30-day window's signals (cold,
then from the store), skipping the agreements and their evaluation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from throwaway import django_on_throwaway

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
TARGET_SECONDS = 10.0
COLD_SECONDS = 3.0
STORED_SECONDS = 0.3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--agreements", type=int, default=100)
    parser.add_argument(
        "--window-only",
        action="store_true",
        help="time only the 30-day window's signals (cold and from the store)",
    )
    args = parser.parse_args()
    django_on_throwaway("bench_promises", DEMO_TIME_FACTOR="1")
    import engine as bench_engine
    from django.contrib.auth.models import User
    from whatif import T0, load

    from governance.models import PromiseEvaluation, Share
    from governance.services import agreements, promises
    from scheduler import simulate

    print(f"== promises, {args.agreements} agreements on {args.jobs:,} jobs ==", flush=True)
    data = bench_engine.oversubscribed_scenario(args.jobs, 1.0)
    started = time.perf_counter()
    played = simulate.run(data)
    queue = load(data, played["events"])
    print(f"  history played and written in {time.perf_counter() - started:.1f} s", flush=True)
    # The 30 days the jobs arrived in (the backlog drains for weeks after: a window at
    # the very end would hold only the few shares still draining).
    stop = T0 + timedelta(days=30)
    if args.window_only:
        _analyze()
        window(queue, stop)
        print(f"  (load average while it ran: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        return
    admin = User.objects.create(username="bench-admin", is_superuser=True)
    shares = list(Share.objects.filter(queue=queue).order_by("name"))
    for index in range(args.agreements):
        share = shares[index % len(shares)]
        agreements.agreement_create(
            actor=admin,
            title=f"Agreement {index}",
            shares=[share.pk],
            promises=[
                {
                    "figure": "wait_to_start.entitled.p90",
                    "share": share.pk,
                    "comparison": "<=",
                    "threshold": 3600 + index,
                    "window_days": 30,
                },
                {
                    "figure": "goodput",
                    "share": share.pk,
                    "comparison": ">=",
                    "threshold": 0.9,
                    "window_days": 30,
                },
                {
                    "figure": "preemptions_per_finished_job",
                    "team": share.team_id,
                    "comparison": "<=",
                    "threshold": 0.5,
                    "window_days": 30,
                },
            ],
        )
    _analyze()
    started, cpu = time.perf_counter(), time.process_time()
    evaluated = promises.promises_evaluate(stop=stop)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    states: dict[str, int] = {}
    for row in PromiseEvaluation.objects.values_list("state", flat=True):
        states[row] = states.get(row, 0) + 1
    verdict = "OK" if seconds < TARGET_SECONDS else "MISSED"
    print(f"  evaluated {len(evaluated)} promises of {args.agreements} agreements: {states}")
    print(
        f"  evaluate all promises, 30-day windows       {seconds:>8.2f} s"
        f"   (target < {TARGET_SECONDS:g} s)  {verdict}"
    )
    print(f"  the same, CPU time of this process          {cpu_seconds:>8.2f} s")
    started, cpu = time.perf_counter(), time.process_time()
    promises.promises_evaluate(stop=stop)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"  the same again, windows from the store      {seconds:>8.2f} s"
        f"   (target < {TARGET_SECONDS:g} s)  {'OK' if seconds < TARGET_SECONDS else 'MISSED'}"
    )
    print(f"  the same, CPU time of this process          {cpu_seconds:>8.2f} s")
    window(queue, stop)
    print(f"  (load average while it ran: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


def _analyze() -> None:
    """A live database has statistics (autovacuum analyzes a table after its rows change);
    one just written by the bench has none until autovacuum's next round, and without them
    the planner takes 100,000 jobs for one row (nested loops over the events)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def window(queue: object, stop: datetime) -> None:
    """The 30-day window's signals as the API answers them: cold, then from the store."""
    import statistics

    from governance.models import SignalAnswer
    from governance.selectors import scheduling

    start = stop - timedelta(days=30)
    SignalAnswer.objects.all().delete()
    began, cpu = time.perf_counter(), time.process_time()
    scheduling.queue_signals(queue, start, stop)  # type: ignore[arg-type]
    cold, cold_cpu = time.perf_counter() - began, time.process_time() - cpu
    verdict = "OK" if cold <= COLD_SECONDS else "MISSED"
    print(
        f"  signals, 30-day window, cold                {cold:>8.2f} s"
        f"   (target <= {COLD_SECONDS:g} s)  {verdict}"
    )
    print(f"  the same, CPU time of this process          {cold_cpu:>8.2f} s")
    times = []
    for _ in range(5):
        began = time.perf_counter()
        scheduling.queue_signals(queue, start, stop)  # type: ignore[arg-type]
        times.append(time.perf_counter() - began)
    stored = statistics.median(times) * 1000
    verdict = "OK" if stored <= STORED_SECONDS * 1000 else "MISSED"
    print(
        f"  signals, 30-day window, from the store      {stored:>8.1f} ms"
        f"  (target <= {STORED_SECONDS * 1000:g} ms)  {verdict}"
    )


if __name__ == "__main__":
    main()
