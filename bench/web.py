"""Page and live-partial server times on a large dataset under 20 concurrent clients.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything \\
    BENCH_REDIS_URL=redis://127.0.0.1:6379/13 .venv/bin/python bench/web.py [--quick]

Everything runs in a throwaway database ``bench_web`` on the ``DATABASE_URL`` server
(dropped and re-created each run; the test and dev databases are never touched). The
demo world (queues, shares, teams, users, bands, agreements, exceptions) is loaded
through the services with the scheduler run eagerly, then 50,000 jobs and 500,000 audit
entries (``--quick``: 5,000 and 50,000) are bulk-created, spread over the demo's shares,
states, event types, actors and three months.

Measurement: 20 processes (forked after loading), each with its own Django test
``Client``, database connection and signed-in session (the admin: every page is open to
it), request every page and partial in a shuffled order for a number of rounds. The
figure is the server time: wall time around ``client.get`` in process, i.e. the whole
Django stack (middleware, view, queries, template rendering) without network or HTTP
parsing. With more clients than CPUs it includes waiting for a CPU, as a server would;
a first pass with one client alone gives the uncontended cost ("solo p50").
Targets: p95 <= 100 ms for pages, <= 30 ms for partials.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "bench_web"
CLIENTS = 20
PAGE_TARGET_MS = 100.0
PARTIAL_TARGET_MS = 30.0


def _setup_environment() -> None:
    """Point this process at the throwaway database before Django loads."""
    base = os.environ.get("DATABASE_URL")
    if not base:
        sys.exit("set DATABASE_URL to a PostgreSQL server (its database name is ignored)")
    parts = urlsplit(base)
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    bench_url = urlunsplit(parts._replace(path=f"/{BENCH_DB}"))
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")
    os.environ.update(
        DATABASE_URL=bench_url,
        REDIS_URL=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"),
        # The demo's submissions are scheduled inline: running jobs fill the bars.
        CELERY_TASK_ALWAYS_EAGER="true",
        DJANGO_SETTINGS_MODULE="governance.settings",
        LOG_LEVEL="WARNING",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def load(jobs_total: int, audit_total: int) -> None:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from governance import demo
    from governance.models import AuditEntry, AuditEvent, Job, JobState, Share

    started = time.perf_counter()
    demo.load()
    say(f"demo loaded in {time.perf_counter() - started:.1f} s")
    rng = random.Random(5)
    now = timezone.now()
    shares = list(Share.objects.select_related("team", "queue"))
    users = list(get_user_model().objects.all())
    finished = [JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED]

    started = time.perf_counter()
    batch: list[Job] = []
    for i in range(jobs_total):
        share = rng.choice(shares)
        pending = rng.random() < 0.05
        submitted = now - timedelta(seconds=rng.randint(60, 90 * 86400))
        type_name = (
            next(iter(demo.FLEET_CAPACITY))
            if share.queue.name != demo.MARKER_QUEUE
            else ("ml.g5.xlarge")
        )
        batch.append(
            Job(
                queue_id=share.queue_id,
                share=share,
                name=f"bulk-{i}",
                submitter=rng.choice(users),
                priority=rng.randint(0, 99),
                preferences=[{"instance_type": type_name, "count": 1}],
                duration=3600,
                state=JobState.PENDING if pending else rng.choice(finished),
                submitted_at=submitted,
                finished_at=None if pending else submitted + timedelta(hours=1),
            )
        )
        if len(batch) == 5000:
            Job.objects.bulk_create(batch)
            batch = []
    Job.objects.bulk_create(batch)
    job_ids = list(Job.objects.values_list("id", "share_id"))
    say(f"{jobs_total:,} jobs in {time.perf_counter() - started:.1f} s")

    started = time.perf_counter()
    share_by_id = {s.pk: s for s in shares}
    events = [e.value for e in AuditEvent]
    entries: list[AuditEntry] = []
    for i in range(audit_total):
        event = rng.choice(events)
        job_id, share_id = rng.choice(job_ids)
        share = share_by_id[share_id]
        job_event = event.startswith("job.")
        entries.append(
            AuditEntry(
                event_type=event,
                actor=None if job_event and rng.random() < 0.7 else rng.choice(users),
                subject_type="job" if job_event else event.split(".", 1)[0],
                subject_id=str(job_id if job_event else share_id),
                subject_repr=f"bulk-{i}",
                team_id=share.team_id,
                share_id=share_id,
                job_id=job_id if job_event else None,
                queue_id=share.queue_id,
                before={"priority": rng.randint(0, 99)} if rng.random() < 0.5 else None,
                after={
                    "priority": rng.randint(0, 99),
                    "rule": "own",
                    "job": f"bulk-{i}",
                    "team": share.team.name,
                    "instance_type": "ml.g5.xlarge",
                },
                reason="bulk" if rng.random() < 0.2 else "",
                created_at=now - timedelta(seconds=rng.randint(120, 90 * 86400)),
            )
        )
        if len(entries) == 10000:
            AuditEntry.objects.bulk_create(entries)
            entries = []
    AuditEntry.objects.bulk_create(entries)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    say(f"{audit_total:,} audit entries in {time.perf_counter() - started:.1f} s")


def urls() -> list[tuple[str, str, str]]:
    """(kind, label, url) of every page and live partial, on the busiest objects."""
    from governance.models import Job, JobQueue, JobState, PriorityException, Share

    fleet = JobQueue.objects.get(name="gpu-fleet")
    share = Share.objects.get(name="vision-training")
    running = Job.objects.filter(state=JobState.RUNNING).order_by("id").first()
    job = running or Job.objects.order_by("id").first()
    assert job is not None
    exc = PriorityException.objects.order_by("id").first()
    assert exc is not None
    return [
        ("page", "overview", "/"),
        ("page", "queues", "/queues/"),
        ("page", "queue", f"/queues/{fleet.pk}/"),
        ("page", "share", f"/shares/{share.pk}/"),
        ("page", "share edit", f"/shares/{share.pk}/edit/"),
        ("page", "jobs", "/jobs/"),
        ("page", "jobs (pending)", "/jobs/?state=PENDING"),
        ("page", "job", f"/jobs/{job.pk}/"),
        ("page", "priorities", "/priorities/"),
        ("page", "exceptions", "/exceptions/"),
        ("page", "exception", f"/exceptions/{exc.pk}/"),
        ("page", "agreements", "/agreements/"),
        ("page", "audit", "/audit/"),
        ("page", "audit (filtered)", f"/audit/?event_type=share.updated&share={share.pk}"),
        ("partial", "overview usage", "/partials/usage/"),
        ("partial", "overview feed", "/partials/feed/"),
        ("partial", "queue usage", f"/queues/{fleet.pk}/partials/usage/"),
        ("partial", "job status", f"/jobs/{job.pk}/partials/status/"),
    ]


def _client_run(
    targets: list[tuple[str, str, str]], rounds: int, seed: int, barrier: Any, out: Any
) -> None:
    """One client: its own process, DB connection, test Client and signed-in session."""
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.test import Client

    connections.close_all()  # never share the parent's connection across fork
    client = Client()
    client.force_login(get_user_model().objects.get(username="admin"))
    rng = random.Random(seed)
    for _, _label, url in targets:  # warm-up: not counted
        client.get(url)
    if barrier is not None:
        barrier.wait()
    mine: list[tuple[str, float, int]] = []
    for _ in range(rounds):
        order = targets[:]
        rng.shuffle(order)
        for _, label, url in order:
            headers = {"HTTP_HX_REQUEST": "true"} if "/partials/" in url else {}
            start = time.perf_counter()
            response = client.get(url, **headers)
            mine.append((label, (time.perf_counter() - start) * 1000, response.status_code))
    out.put(mine)


def measure(
    targets: list[tuple[str, str, str]], rounds: int, clients: int
) -> dict[str, list[float]]:
    """``clients`` processes (forked after loading) request every URL ``rounds`` times."""
    import multiprocessing

    from django.db import connections

    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    barrier = ctx.Barrier(clients) if clients > 1 else None
    procs = [
        ctx.Process(target=_client_run, args=(targets, rounds, i, barrier, out))
        for i in range(clients)
    ]
    for proc in procs:
        proc.start()
    samples: dict[str, list[float]] = {label: [] for _, label, _ in targets}
    errors = []
    for _ in procs:
        for label, ms, status in out.get():
            samples[label].append(ms)
            if status != 200:
                errors.append(f"{label}: {status}")
    for proc in procs:
        proc.join()
    if errors:
        say(f"{len(errors)} non-200 responses, e.g. {sorted(set(errors))[:5]}")
    return samples


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def report(
    targets: list[tuple[str, str, str]],
    loaded: dict[str, list[float]],
    solo: dict[str, list[float]],
) -> bool:
    ok_all = True
    print()
    print(
        f"{'kind':<8} {'view':<17} {'url':<40} {'solo p50':>8} {'p50 ms':>7} {'p95 ms':>7} "
        f"{'target':>6}  ok"
    )
    print("-" * 104)
    for kind, label, url in targets:
        values = loaded[label]
        target = PAGE_TARGET_MS if kind == "page" else PARTIAL_TARGET_MS
        p95 = pct(values, 95)
        ok = p95 <= target
        ok_all &= ok
        print(
            f"{kind:<8} {label:<17} {url[:40]:<40} {statistics.median(solo[label]):>8.1f} "
            f"{statistics.median(values):>7.1f} {p95:>7.1f} {target:>6.0f}  {'yes' if ok else 'NO'}"
        )
    return ok_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, 50,000 audit entries")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per client")
    args = parser.parse_args()
    jobs_total, audit_total = (5_000, 50_000) if args.quick else (50_000, 500_000)
    rounds = args.rounds or (3 if args.quick else 5)
    _setup_environment()
    load(jobs_total, audit_total)
    targets = urls()
    say(f"1 client x {rounds} rounds x {len(targets)} URLs (uncontended reference)")
    solo = measure(targets, rounds, 1)
    say(f"{CLIENTS} clients x {rounds} rounds x {len(targets)} URLs")
    started = time.perf_counter()
    samples = measure(targets, rounds, CLIENTS)
    wall = time.perf_counter() - started
    print(
        f"\nbench/web.py: {jobs_total:,} jobs, {audit_total:,} audit entries; server time in "
        f"process (Django test Client, whole stack, no network); {CLIENTS} concurrent clients "
        f"= {CLIENTS} processes with own sessions on {os.cpu_count()} CPUs; 'solo p50' = one "
        "client alone"
    )
    ok = report(targets, samples, solo)
    total = sum(len(v) for v in samples.values())
    print(f"\n{total} requests in {wall:.1f} s ({total / wall:.0f} req/s under load)")
    print("all targets met" if ok else "some targets NOT met")


if __name__ == "__main__":
    main()
