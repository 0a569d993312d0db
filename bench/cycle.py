"""The cost of one persisted cycle: reading only what changed (the kept engine,
``scheduler/cycle/kept.py``) against reading the whole queue each time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything \\
    BENCH_REDIS_URL=redis://127.0.0.1:6379/11 .venv/bin/python bench/cycle.py [--repeat 7]

Runs in a throwaway database ``bench_cycle_<name>`` on the ``DATABASE_URL`` server
(dropped and re-created each run); the cycles' metrics go to ``BENCH_REDIS_URL`` (never
flushed). Two queues run by agents (the executor does not run jobs itself), built by
:func:`build` (``bench/live.py`` builds its cycle queue with it too): 20 shares, one with
100 pending and 50 running jobs, one with 10,000 pending and 5,000 running. For each,
with the kept engine and with ``SCHEDULER_INCREMENTAL_CYCLE`` off:

- a pass that changes nothing: median of ``--repeat`` cycles in a row, nothing
  changed in between (target <= 10 ms at 10,000 + 5,000 with the kept engine; and about
  the same at 100 as at 10,000);
- a pass admitting 16 jobs: 16 running one-instance jobs of lending shares complete
  (``services/runs.py`` ``runs_complete``, not timed), then one cycle is timed; median of
  ``--repeat`` (target <= 50 ms).

Figures are wall-clock ``run_cycle`` calls from this process (a real transaction, its
commit and the metrics write included). Report ``uptime`` beside them.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from datetime import timedelta
from typing import Any

from throwaway import django_on_throwaway

G5, P4 = "ml.g5.xlarge", "ml.p4d.24xlarge"
SHARES = 20


def figure(label: str, value: str, target: str = "", ok: bool | None = None) -> None:
    verdict = "" if ok is None else ("  OK" if ok else "  MISSED")
    target_text = f"   (target {target})" if target else ""
    print(f"  {label:<58} {value:>10}{target_text}{verdict}", flush=True)


def build(name: str, pending_each: int, g5_each: int, p4_each: int) -> Any:
    """A queue of agents: SHARES shares, each running ``g5_each`` + ``p4_each`` jobs of
    one instance on a full queue and waiting with ``pending_each`` more."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from governance.models import (
        InstanceType,
        Job,
        JobQueue,
        JobState,
        QueueCapacity,
        Share,
        ShareLimit,
        Team,
    )

    rng = random.Random(1)
    types = {
        G5: InstanceType.objects.get_or_create(name=G5, defaults={"accelerators": 1})[0],
        P4: InstanceType.objects.get_or_create(name=P4, defaults={"accelerators": 8})[0],
    }
    user = User.objects.get_or_create(username="bench")[0]
    queue = JobQueue.objects.create(name=name, executor="agent")
    for type_name, each in ((G5, g5_each), (P4, p4_each)):
        QueueCapacity.objects.create(
            queue=queue, instance_type=types[type_name], count=SHARES * each
        )
    now = timezone.now()
    rows: list[Any] = []
    policies = ["RESERVE", "LEND", "LEND_AND_BORROW"]
    for i in range(SHARES):
        policy = policies[i % 3]
        team = Team.objects.get_or_create(name=f"team-{i:02d}")[0]
        share = Share.objects.create(
            queue=queue,
            team=team,
            name=f"team-{i:02d}",
            policy=policy,
            borrow_limit=100 if policy == "LEND_AND_BORROW" else None,
        )
        for type_name, each in ((G5, g5_each), (P4, p4_each)):
            ShareLimit.objects.create(share=share, instance_type=types[type_name], count=each)
            for k in range(each):
                started = now - timedelta(seconds=rng.randint(10, 3600))
                rows.append(
                    Job(
                        queue=queue,
                        share=share,
                        submitter=user,
                        name=f"run-{i}-{type_name}-{k}",
                        priority=rng.randint(0, 500),
                        preferences=[{"instance_type": type_name, "count": 1}],
                        state=JobState.RUNNING,
                        instance_type=types[type_name],
                        preference=0,
                        run=1,
                        submitted_at=started,
                        started_at=started,
                        run_started_at=started,
                    )
                )
        for k in range(pending_each):
            prefs = [
                {"instance_type": t, "count": 1} for t in rng.sample([G5, P4], rng.randint(1, 2))
            ]
            rows.append(
                Job(
                    queue=queue,
                    share=share,
                    submitter=user,
                    name=f"wait-{i}-{k}",
                    priority=rng.randint(0, 500),
                    preferences=prefs,
                    submitted_at=now - timedelta(seconds=rng.randint(0, 3600)),
                )
            )
    Job.objects.bulk_create(rows, batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return queue


def timed_cycle(queue_id: int) -> tuple[float, Any]:
    from scheduler.cycle.run import run_cycle

    started = time.perf_counter()
    result = run_cycle(queue_id)
    return time.perf_counter() - started, result


def complete_some(queue: Any, n: int) -> None:
    """``n`` running one-instance G5 jobs of lending shares complete (their agents'
    reports), in a transaction of their own."""
    from django.utils import timezone

    from governance.models import Job, JobState
    from governance.services import runs

    done = list(
        Job.objects.filter(
            queue=queue,
            state=JobState.RUNNING,
            instance_type__name=G5,
            share__policy__in=("LEND", "LEND_AND_BORROW"),
        )
        .order_by("?")
        .values_list("id", "run")[:n]
    )
    runs.runs_complete(done=done, now=timezone.now())


def measure(queue: Any, label: str, repeat: int, *, big: bool) -> dict[str, float]:
    from django.conf import settings

    kept_on = settings.SCHEDULER_INCREMENTAL_CYCLE
    mode = "kept engine" if kept_on else "full read"
    # Warm: the first cycle reads in full (nothing kept yet); the next re-reads what
    # it decided; then nothing is left to decide.
    for _ in range(3):
        timed_cycle(queue.pk)
    nothing = []
    for _ in range(repeat):
        seconds, result = timed_cycle(queue.pk)
        assert result.admitted == 0 and result.preempted == 0, result
        assert result.read == ("kept" if kept_on else result.read), result.read
        nothing.append(seconds)
    idle = statistics.median(nothing)
    target = big and kept_on
    figure(
        f"pass that changes nothing, {label} ({mode})",
        f"{idle * 1000:.1f} ms",
        "<= 10 ms" if target else "",
        idle <= 0.010 if target else None,
    )
    admitting = []
    admitted = []
    for _ in range(repeat):
        complete_some(queue, 16)
        seconds, result = timed_cycle(queue.pk)
        admitting.append(seconds)
        admitted.append(result.admitted)
        timed_cycle(queue.pk)  # the next re-reads what this one decided: not timed
    busy = statistics.median(admitting)
    figure(
        f"pass admitting {statistics.median(admitted):.0f} jobs, {label} ({mode})",
        f"{busy * 1000:.1f} ms",
        "<= 50 ms" if target else "",
        busy <= 0.050 if target else None,
    )
    return {"nothing": idle, "admitting": busy}


def profile(queue: Any) -> None:
    """Where a kept pass spends its time (cProfile): one that changes nothing, then one
    admitting 16 jobs."""
    import cProfile
    import pstats

    for _ in range(3):
        timed_cycle(queue.pk)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(20):
        timed_cycle(queue.pk)
    profiler.disable()
    print("== 20 passes that change nothing")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    profiler = cProfile.Profile()
    for _ in range(5):
        complete_some(queue, 16)
        profiler.enable()
        timed_cycle(queue.pk)
        profiler.disable()
        timed_cycle(queue.pk)
    print("== 5 passes admitting 16 jobs")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--profile", action="store_true", help="profile a kept pass at 10,000 and stop there"
    )
    args = parser.parse_args()
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
    django_on_throwaway("bench_cycle", REDIS_URL=redis_url, CELERY_TASK_ALWAYS_EAGER="false")
    from django.conf import settings

    from governance.services import hooks

    hooks.cycle_wanted.receivers = []  # the bench runs the cycles itself
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    small = build("small", pending_each=5, g5_each=2, p4_each=1)  # 100 pending, 60 running
    big = build("big", pending_each=500, g5_each=150, p4_each=100)  # 10,000 + 5,000
    if args.profile:
        profile(big)
        return
    figures: dict[tuple[str, bool], dict[str, float]] = {}
    for kept_on in (True, False):
        settings.SCHEDULER_INCREMENTAL_CYCLE = kept_on
        print(f"\n== {'kept engine' if kept_on else 'full read (SCHEDULER_INCREMENTAL_CYCLE off)'}")
        figures["small", kept_on] = measure(
            small, "100 pending + 60 running", args.repeat, big=False
        )
        figures["big", kept_on] = measure(
            big, "10,000 pending + 5,000 running", args.repeat, big=True
        )
    ratio = figures["big", True]["nothing"] / figures["small", True]["nothing"]
    print()
    figure(
        "changes nothing: 10,000 pending over 100 (kept)",
        f"{ratio:.2f}x",
        "about 1x, <= 2x",
        ratio <= 2,
    )
    speedup = figures["big", False]["nothing"] / figures["big", True]["nothing"]
    figure("changes nothing at 10,000: full read over kept", f"{speedup:.0f}x")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
