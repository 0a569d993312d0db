"""Many queues on one and on two Celery worker processes: cycles per second per queue,
submit-to-admitted latency, and the longest a busy queue waits between two cycles.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything \\
    BENCH_REDIS_URL=redis://127.0.0.1:6379/8 .venv/bin/python bench/scale.py \\
        [--queues 20] [--pending 5000] [--seconds 60] [--rate 1] [--workers 1 --workers 2]

Runs in a throwaway database ``bench_scale_<name>`` and a Redis database of its own
(``BENCH_REDIS_URL``, flushed: give it one nobody else uses). Each of ``--queues``
queues (simulated executor, 60 simulated seconds a second) has a deep backlog: a share
whose ``--pending`` jobs wait for ``ml.p4d.24xlarge`` instances its running jobs hold
for the whole run, so every cycle of the queue weighs them and admits none of them; and
a share that receives steady submissions (``--rate`` a second per queue, open loop,
through the job service in this process) of half-minute ``ml.g5.xlarge`` jobs on free
instances, each admitted by the queue's next cycle. Every queue is thus busy: a
submission asks for a cycle while it has none pending (scheduler/triggers.py), so how
often a queue gets one is what the workers can give.

For each worker count, the workers (``celery worker --pool solo``, as deployed, no beat)
first warm up (cycles are asked for until every worker has run one of every queue: its
first reads the whole queue and keeps the engine, scheduler/cycle/kept.py, as a worker
that has been up a while has), then run for ``--seconds`` of submissions; each cycle is
read from the workers' logs (the task's end, run time and how it read the queue).
Prints, per worker count, the cycles per second per queue (mean, lowest and highest
queue), how many cycles read only what changed, the share of the window the busiest
worker spent in cycles, the longest wait of a queue between the end of one cycle and
the start of its next, submit-to-admitted percentiles and anything not admitted; then
the speed-up of two workers over one. That ratio measures capacity only when one worker
is busy all the time: one with time to spare already runs every cycle the queues ask
for, and the bench says so instead of judging the ratio. Targets (docs/operations.md,
"Several hosts"): 2 workers >= 1.7x the cycles per second of 1; no busy queue waits
more than 2 s between cycles. Prints the scale it ran at: at the full scale (20 queues
of 5,000 pending) the setup writes 100,000 jobs.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import threading
import time
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from live import (
    G5,
    P4,
    _queue,
    _share,
    _user,
    figure,
    heading,
    process,
    wait_for_worker,
    worker_command,
)
from throwaway import django_on_throwaway

RUNNING_P4 = 10  # per queue: the instances the backlog waits for, held all run long
STEADY_G5 = 40  # per queue: free instances for the steady submissions

# Celery's line for a finished cycle task: its end (local time, ms), run time, queue and
# how it read the queue (``CycleResult.read``).
_CYCLE_LINE = re.compile(
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): INFO/[^\]]*\] Task "
    r"scheduler\.tasks\.schedule_queue\[[^\]]+\] succeeded in ([\d.e-]+)s: \{'queue': (\d+)"
    r"[^}]*'read': '([^']*)'"
)


def _fixtures(queues_n: int, pending: int) -> list[tuple[int, int, object]]:
    """The queues with their backlogs; (queue id, steady share id, submitter) each."""
    from django.db import connection
    from django.utils import timezone

    from governance.models import InstanceType, Job, JobState, Membership

    rng = random.Random(1)
    p4 = InstanceType.objects.get_or_create(name=P4, defaults={"accelerators": 8})[0]
    backlog_user = _user("scale-backlog")
    now = timezone.now()
    out: list[tuple[int, int, object]] = []
    for q in range(queues_n):
        queue = _queue(f"scale-{q:02d}", {G5: STEADY_G5, P4: RUNNING_P4})
        backlog = _share(queue, f"backlog-{q:02d}", {P4: RUNNING_P4})
        steady = _share(queue, f"steady-{q:02d}", {G5: STEADY_G5})
        user = _user(f"scale-lead-{q:02d}")
        Membership.objects.get_or_create(team=steady.team, user=user, defaults={"role": "lead"})
        rows = [
            Job(
                queue=queue,
                share=backlog,
                submitter=backlog_user,
                name=f"hold-{q}-{k}",
                preferences=[{"instance_type": P4, "count": 1}],
                state=JobState.RUNNING,
                instance_type=p4,
                preference=0,
                run=1,
                duration=10**7,
                submitted_at=now - timedelta(hours=1),
                started_at=now - timedelta(hours=1),
                run_started_at=now - timedelta(hours=1),
            )
            for k in range(RUNNING_P4)
        ]
        rows += [
            Job(
                queue=queue,
                share=backlog,
                submitter=backlog_user,
                name=f"wait-{q}-{k}",
                priority=rng.randint(0, 500),
                preferences=[{"instance_type": P4, "count": 1}],
                duration=3600,
                submitted_at=now - timedelta(seconds=rng.randint(0, 3600)),
            )
            for k in range(pending)
        ]
        Job.objects.bulk_create(rows, batch_size=2000)
        out.append((queue.pk, steady.pk, user))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return out


SUBMITTERS = 4  # threads sending the steady submissions


def _submit(targets: list[tuple[int, int, object]], rate: float, seconds: float, tag: str) -> int:
    """Open loop: submission ``i`` at ``start + i / (rate * queues)``, round robin over the
    queues, through the job service, by a few threads taking the next slot in turn (a slow
    submission delays no later one while a thread is free); returns how many were sent
    over 100 ms late."""
    from django.db import connections

    from governance.services.jobs import job_submit

    total = int(seconds * rate * len(targets))
    step = 1.0 / (rate * len(targets))
    slots = iter(range(total))
    lock = threading.Lock()
    late = [0]
    started = time.monotonic()

    def sender() -> None:
        try:
            while True:
                with lock:
                    i = next(slots, None)
                if i is None:
                    return
                pause = started + i * step - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                elif pause < -0.1:
                    with lock:
                        late[0] += 1
                queue_id, share_id, user = targets[i % len(targets)]
                job_submit(
                    actor=user,
                    share=share_id,
                    queue=queue_id,
                    name=f"{tag}-{i}",
                    duration=30,
                    preferences=[{"instance_type": G5, "count": 1}],
                )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sender) for _ in range(SUBMITTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return late[0]


def _drain(tag: str, seconds: float) -> None:
    """Wait (at most ``seconds``) until every submission of ``tag`` was admitted."""
    from governance.models import Job

    deadline = time.monotonic() + seconds
    while Job.objects.filter(name__startswith=f"{tag}-", started_at__isnull=True).exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.5)


class Cycle(NamedTuple):
    start: float
    end: float
    worker: int
    kept: bool
    """Read only what changed (``CycleResult.read`` "kept"), not the whole queue."""


def _cycles(logs: list[Path]) -> dict[int, list[Cycle]]:
    """Every cycle in the workers' logs: queue id -> its cycles, in epoch seconds."""
    found: dict[int, list[Cycle]] = {}
    for worker, log in enumerate(logs):
        for line in log.read_text(errors="replace").splitlines():
            match = _CYCLE_LINE.search(line)
            if match is None:
                continue
            end = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            cycle = Cycle(end - float(match[2]), end, worker, match[4] == "kept")
            found.setdefault(int(match[3]), []).append(cycle)
    for spans in found.values():
        spans.sort()
    return found


def _warm(queue_ids: list[int], logs: list[Path], seconds: float = 180.0) -> None:
    """Until every worker has run a cycle of every queue (its first reads the whole queue
    and keeps the engine, as a worker that has been up a while has): cycles are asked
    for all queues again and again, each worker taking what it takes. A long-running
    deployment is in this state; the window measures it, not the workers' first reads."""
    from scheduler import triggers

    deadline = time.monotonic() + seconds
    wanted = {(w, q) for w in range(len(logs)) for q in queue_ids}
    while time.monotonic() < deadline:
        seen = {(c.worker, q) for q, cycles in _cycles(logs).items() for c in cycles}
        if wanted <= seen:
            return
        for queue_id in queue_ids:
            triggers.request_cycle(queue_id)
        time.sleep(0.5)
    print(f"  warm-up: {len(wanted - seen)} (worker, queue) pairs never ran in {seconds:.0f} s")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def run_phase(
    workers: int,
    targets: list[tuple[int, int, object]],
    args: argparse.Namespace,
    env: dict[str, str],
    logs_dir: Path,
) -> tuple[float, float]:
    """One worker count: returns the mean cycles per second per queue, and the share of
    the window the busiest worker spent in cycles."""
    import redis
    from django.db import connections

    from governance.models import Job, JobEvent

    heading(f"{workers} worker process{'es' if workers > 1 else ''}")
    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    names = [f"scale-{workers}-{k}-{os.getpid()}@{os.uname().nodename}" for k in range(workers)]
    logs = [logs_dir / f"worker-{workers}-{k}.log" for k in range(workers)]
    worker_env = dict(env, DEMO_TIME_FACTOR="60", LOG_LEVEL="INFO")
    tag = f"steady-{workers}w"
    connections.close_all()
    with ExitStack() as stack:
        for name, log in zip(names, logs, strict=True):
            stack.enter_context(process(_info(worker_command(name)), worker_env, log))
        for name in names:
            wait_for_worker(name)
        warming = time.perf_counter()
        _warm([queue_id for queue_id, _, _ in targets], logs)
        print(
            f"  warm-up (each worker's first cycle of each queue): "
            f"{time.perf_counter() - warming:.0f} s",
            flush=True,
        )
        time.sleep(1.0)
        window = (time.time(), 0.0)
        late = _submit(targets, args.rate, args.seconds, tag)
        window = (window[0], time.time())
        _drain(tag, args.drain)  # the last submissions' cycles
    cycles = _cycles(logs)
    start, stop = window
    span = stop - start
    queue_ids = [queue_id for queue_id, _, _ in targets]
    within = [c for q in queue_ids for c in cycles.get(q, []) if start <= c.end <= stop]
    rates = [sum(1 for c in cycles.get(q, []) if start <= c.end <= stop) / span for q in queue_ids]
    waits: list[float] = []
    worst = (0.0, 0)
    for q in queue_ids:
        spans = [(c.start, c.end) for c in cycles.get(q, []) if c.end >= start and c.start <= stop]
        # The wait before the first cycle counts too, from the start of the submissions.
        ends = [start, *(e for _, e in spans)]
        starts = [s for s, _ in spans] + [stop]
        for ended, began in zip(ends, starts, strict=True):
            waits.append(began - ended)
            if began - ended > worst[0]:
                worst = (began - ended, q)
    durations = [c.end - c.start for c in within]
    busy = max(
        (sum(c.end - c.start for c in within if c.worker == w) / span for w in range(workers)),
        default=0.0,
    )
    figure("cycles per second per queue (mean)", f"{statistics.mean(rates):.2f}")
    figure("  lowest / highest queue", f"{min(rates):.2f} / {max(rates):.2f}")
    figure("cycles per second, all queues", f"{sum(rates):.1f}")
    if durations:
        figure(
            "cycle run time p50 / p95",
            f"{_pct(durations, 50) * 1000:.0f} / {_pct(durations, 95) * 1000:.0f} ms",
        )
    figure("cycles that read only what changed", f"{sum(c.kept for c in within)} of {len(within)}")
    figure("busiest worker: time in cycles", f"{busy:.0%}")
    figure(
        "longest wait between two cycles",
        f"{worst[0]:.2f} s",
        "<= 2 s",
        worst[0] <= 2.0,
    )
    figure("  p95 wait between cycles", f"{_pct(waits, 95):.2f} s")
    submitted = dict(
        Job.objects.filter(name__startswith=f"{tag}-").values_list("id", "submitted_at")
    )
    admitted: dict[int, object] = {}
    for job_id, at in (
        JobEvent.objects.filter(job_id__in=list(submitted), type="admitted")
        .order_by("at")
        .values_list("job_id", "at")
    ):
        admitted.setdefault(job_id, at)
    latencies = sorted(
        (admitted[j] - submitted[j]).total_seconds() * 1000  # type: ignore[operator]
        for j in admitted
    )
    print(f"  submitted {len(submitted)} ({late} sent >100 ms behind schedule)")
    if latencies:
        figure("submit-to-admitted p50", f"{_pct(latencies, 50):.0f} ms")
        figure("submit-to-admitted p95", f"{_pct(latencies, 95):.0f} ms")
        figure("submit-to-admitted max", f"{latencies[-1]:.0f} ms")
    figure("never admitted", str(len(submitted) - len(admitted)))
    return statistics.mean(rates), busy


def _info(command: list[str]) -> list[str]:
    """The worker at INFO: its log then names every task it finished (the cycles)."""
    return [("INFO" if part == "WARNING" else part) for part in command]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--pending", type=int, default=5000, help="pending jobs per queue")
    parser.add_argument("--seconds", type=float, default=60.0, help="of submissions per run")
    parser.add_argument("--rate", type=float, default=1.0, help="submissions/s per queue")
    parser.add_argument("--workers", type=int, action="append", help="default: 1 and 2")
    parser.add_argument(
        "--drain", type=float, default=60.0, help="longest wait for the last admissions (s)"
    )
    args = parser.parse_args()
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/8")
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    _, bench_url = django_on_throwaway(
        "bench_scale", REDIS_URL=redis_url, CELERY_TASK_ALWAYS_EAGER="false"
    )
    env = dict(
        os.environ,
        DATABASE_URL=bench_url,
        REDIS_URL=redis_url,
        LOG_LEVEL="WARNING",
        DB_CONN_MAX_AGE="60",
    )
    logs_dir = Path(os.environ.get("BENCH_LOG_DIR", "/tmp/bench_scale_logs"))
    logs_dir.mkdir(parents=True, exist_ok=True)
    full = args.queues == 20 and args.pending == 5000
    print(
        f"scale: {args.queues} queues x {args.pending} pending jobs, {args.rate:g} "
        f"submissions/s per queue for {args.seconds:g} s"
        + ("" if full else " (scaled down from 20 x 5,000)")
        + f"; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    started = time.perf_counter()
    targets = _fixtures(args.queues, args.pending)
    print(f"  fixtures in {time.perf_counter() - started:.0f} s", flush=True)
    results = {w: run_phase(w, targets, args, env, logs_dir) for w in args.workers or [1, 2]}
    if 1 in results and 2 in results and results[1][0] > 0:
        heading("two workers against one")
        (one, one_busy), (two, _) = results[1], results[2]
        ratio = two / one
        if one_busy < 0.9:
            # Cycles come when asked for: one worker with time to spare already gives
            # every queue all the cycles its changes ask for, and a second has no more
            # to run. The ratio then measures the demand, not the capacity.
            figure("cycles per second, 2 workers / 1", f"{ratio:.2f}x")
            print(
                f"  one worker was busy {one_busy:.0%} of the time: it kept up with every "
                "queue's requests, so a second one has nothing more to run (raise --rate to "
                "saturate one worker and measure the ratio)"
            )
        else:
            figure("cycles per second, 2 workers / 1", f"{ratio:.2f}x", ">= 1.7x", ratio >= 1.7)
    print(f"  (logs in {logs_dir}; load now {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    sys.exit(main())
