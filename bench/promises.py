"""Promises benchmark: every promise of 100 agreements over 30-day windows of a
100,000-job queue.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything .venv/bin/python bench/promises.py \\
        [--jobs N] [--agreements N]

The queue is ``bench/whatif.py``'s: the oversubscribed trace of ``bench/engine.py``
(100,000 jobs over 30 days at an offered load of 1.0) played through the engine and
written to a throwaway database ``bench_promises_<name>`` as the live scheduler would
have left it. Then 100 agreements each link a share of the queue and carry three
promises over the last 30 days (a wait percentile of the share, its goodput, and a
figure of its team), and the bench times what beat's daily pass does:
``services.promises.promises_evaluate`` for the 30-day window the jobs arrived in,
which reads the same signals ``/api/signals/`` answers and writes an evaluation
per promise. Target: under 10 s. Wall-clock on this machine, whatever else it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

from throwaway import django_on_throwaway

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
TARGET_SECONDS = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--agreements", type=int, default=100)
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
    print(f"  (load average while it ran: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
