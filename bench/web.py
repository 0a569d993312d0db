"""Page and live-partial server times on a large dataset under 20 concurrent clients.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything \\
    BENCH_REDIS_URL=redis://127.0.0.1:6379/13 .venv/bin/python bench/web.py [--quick] [--reuse]

Data. Everything runs in a throwaway database ``bench_web`` (``BENCH_WEB_DB`` names
another) on the ``DATABASE_URL`` server (dropped and re-created each run; the test and
dev databases are never touched). The demo world (queues, shares, teams, users, bands,
agreements, exceptions) is loaded through the services with the scheduler run eagerly,
then 50,000 jobs and 500,000 audit entries (``--quick``: 5,000 and 50,000) are
bulk-created, spread over the demo's shares, states, event types, actors and three
months (written without the audit triggers: the bench's entries are not sealed into
the hash chains, which no page reads). ``--reuse`` keeps the ``bench_web`` of a previous
run (only migrating it) to measure again without reloading.

Server. The pages are served as in production: gunicorn on 127.0.0.1 (a free port) with
``2 x CPUs + 1`` sync workers (``--worker-class gthread`` for 4 threads each), DEBUG off,
persistent database connections (``DB_CONN_MAX_AGE=60``, as a deployment sets), and the
Django cache in Redis (``BENCH_REDIS_URL``, flushed first).

Clients. 20 threads in this process, each with its own HTTP connection and its own
session (it signs in as the admin through the login form: every page is open to it),
request every page and partial in a shuffled order for a number of rounds, after one
unmeasured warm-up round. Partials are requested as htmx does (``HX-Request: true``).

Figures. "server" is the ``Server-Timing: app;dur=<ms>`` header that
``governance.web.timing.ServerTimingMiddleware`` (first in ``MIDDLEWARE``) adds: the time
from the request entering Django to the response leaving it (middleware, view, queries,
template rendering), without the network, HTTP parsing or the time a request waits for a
free worker. With more clients than CPUs it includes waiting for a CPU, as any server
does. "client" is the wall time the client saw (connect, send, wait for a worker,
server time, read the body): context only, it grows with the queue in front of the
workers. "solo" is the server p50 of a first pass with one client alone (uncontended).
Targets (issue 34; on the server p95 under 20 clients): every page <= 50 ms, every
partial <= 20 ms, and at least 150 requests/s over the whole run.

What it measures. No scheduler runs beside the server, so nothing is written while the
clients read: after the warm-up round the pages are served from their cached fragments
(governance/web/fragments.py, docs/architecture.md "Cached pages"), each rendered once
per state, viewer class and time bucket (the warm-up round renders them; a time bucket
ending mid-run renders one again). The figures are those of a site between changes: a
page rendered afresh after a write costs what it cost before the fragments, once.

Pages. Every page a signed-in user reads (governance/web/urls.py), on the busiest
objects: the overview (usage, decision feed, open decisions, agreements needing
attention), queues and a queue, a share, its edit form and its lending ledger, jobs and a
job on borrowed capacity (its exposure and entitled start), priorities, exceptions and an
exception, agreements and one with promises, the audit trail, teams and a team,
a workload (its certifications and runs), an open decision, signals, plans, change
requests, notifications; and the live partials. Forms that only write, the admins' pages
and what-if runs (which need a replay first) are left out. Besides the demo, the data
set holds a decision on one failed job in ten, ten more certifications of every
workload and a daily evaluation of every promise for three months, and 60% of the jobs
are runs of one of their team's workloads.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
# BENCH_WEB_DB: another name, for two checkouts measuring on one server at once.
BENCH_DB = os.environ.get("BENCH_WEB_DB", "bench_web")
CLIENTS = 20
PAGE_TARGET_MS = 50.0
PARTIAL_TARGET_MS = 20.0
RATE_TARGET = 150.0  # requests/s under the 20 clients
TIMING = re.compile(r"\bapp;dur=([0-9.]+)")


def _setup_environment(reuse: bool) -> None:
    """Point this process at the throwaway database before Django loads."""
    base = os.environ.get("DATABASE_URL")
    if not base:
        sys.exit("set DATABASE_URL to a PostgreSQL server (its database name is ignored)")
    parts = urlsplit(base)
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    bench_url = urlunsplit(parts._replace(path=f"/{BENCH_DB}"))
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone()
        if not (reuse and exists):
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
    from governance.models import AuditEntry, AuditEvent, Job, JobState, Share, Workload
    from governance.models.audit import chain_of_queue

    started = time.perf_counter()
    demo.load()
    say(f"demo loaded in {time.perf_counter() - started:.1f} s")
    rng = random.Random(5)
    now = timezone.now()
    shares = list(Share.objects.select_related("team", "queue"))
    users = list(get_user_model().objects.all())
    finished = [JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED]
    workloads: dict[int, list[int]] = {}
    for workload_id, team_id in Workload.objects.values_list("id", "team_id"):
        workloads.setdefault(team_id, []).append(workload_id)

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
                # Most runs are of one of the team's workloads (docs/workloads.md).
                workload_id=(
                    rng.choice(workloads[share.team_id])
                    if workloads.get(share.team_id) and rng.random() < 0.6
                    else None
                ),
            )
        )
        if len(batch) == 5000:
            Job.objects.bulk_create(batch)
            batch = []
    Job.objects.bulk_create(batch)
    job_ids = list(Job.objects.values_list("id", "share_id"))
    say(f"{jobs_total:,} jobs in {time.perf_counter() - started:.1f} s")

    started = time.perf_counter()
    # The bulk entries skip the audit triggers (their hash chains, sealed row by row at
    # commit: an hour for 500,000 rows on a busy machine): no page reads the chain, and
    # this database is thrown away. Each entry is put on its queue's chain all the same.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
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
                chain=chain_of_queue(share.queue_id),
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
    with connection.cursor() as cursor:
        cursor.execute("RESET session_replication_role")
    _load_governance(rng, now, users)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    say(f"{audit_total:,} audit entries in {time.perf_counter() - started:.1f} s")


def _load_governance(rng: random.Random, now: Any, users: list[Any]) -> None:
    """What the pages of workloads, decisions and agreements list, at a busy site's size:
    a decision on 1 failed job in 10 (one in ten of those still open), ten more
    certifications of every workload (in all states), and a daily evaluation of every
    promise over the three months."""
    from decimal import Decimal

    from governance.models import (
        Certification,
        CertificationState,
        Decision,
        DecisionState,
        InstanceType,
        Job,
        JobState,
        Promise,
        PromiseEvaluation,
        PromiseState,
        Workload,
    )

    started = time.perf_counter()
    failed = Job.objects.filter(
        state=JobState.FAILED, decision__isnull=True, name__startswith="bulk-"
    ).values_list("id", "share__team_id", "finished_at")
    decisions = []
    closed = [DecisionState.RESUBMITTED, DecisionState.RECLASSIFIED, DecisionState.CLOSED]
    for job_id, team_id, finished_at in failed:
        if finished_at is None or rng.random() >= 0.1:
            continue
        open_ = rng.random() < 0.1
        decisions.append(
            Decision(
                job_id=job_id,
                team_id=team_id,
                state=DecisionState.OPEN if open_ else rng.choice(closed),
                opened_at=finished_at,
                due_at=finished_at + timedelta(days=3),
                decided_at=None if open_ else finished_at + timedelta(hours=5),
                decided_by=None if open_ else rng.choice(users),
                note="" if open_ else "bulk",
            )
        )
    Decision.objects.bulk_create(decisions, batch_size=2000)

    types = list(InstanceType.objects.all())
    certs = []
    for workload in Workload.objects.all():
        for i in range(10):
            state = rng.choice(list(CertificationState))
            decided = state != CertificationState.PROPOSED
            certs.append(
                Certification(
                    workload=workload,
                    instance_type=rng.choice(types),
                    count=rng.randint(1, 4),
                    runtime=rng.randint(600, 7200),
                    converged=True,
                    utilization=Decimal("85.00"),
                    failure_rate=Decimal("1.50"),
                    output_valid=True,
                    notes=f"bulk {i}",
                    state=state,
                    proposed_by=rng.choice(users),
                    proposed_at=now - timedelta(days=rng.randint(5, 80)),
                    decided_by=rng.choice(users) if decided else None,
                    decided_at=now - timedelta(days=rng.randint(1, 4)) if decided else None,
                    expires_at=now + timedelta(days=90) if decided else None,
                )
            )
    Certification.objects.bulk_create(certs)

    evaluations = []
    for promise in Promise.objects.all():
        for day in range(90, 0, -1):
            stop = now - timedelta(days=day)
            evaluations.append(
                PromiseEvaluation(
                    promise=promise,
                    window_start=stop - timedelta(days=promise.window_days),
                    window_stop=stop,
                    value=promise.threshold * rng.uniform(0.8, 1.2),
                    state=rng.choice([PromiseState.KEPT, PromiseState.BROKEN]),
                    evaluated_at=stop,
                )
            )
    PromiseEvaluation.objects.bulk_create(evaluations)
    say(
        f"{len(decisions):,} decisions, {len(certs):,} certifications, "
        f"{len(evaluations):,} promise evaluations in {time.perf_counter() - started:.1f} s"
    )


def urls() -> list[tuple[str, str, str]]:
    """(kind, label, url) of every page and live partial, on the busiest objects."""
    from governance.models import (
        Agreement,
        Decision,
        DecisionState,
        Job,
        JobQueue,
        JobState,
        PriorityException,
        Share,
        Workload,
    )

    fleet = JobQueue.objects.get(name="gpu-fleet")
    share = Share.objects.get(name="vision-training")
    running = Job.objects.filter(state=JobState.RUNNING).order_by("id")
    # A run on borrowed capacity: its page shows its exposure and its entitled start.
    job = running.filter(borrowed__gt=0).first() or running.first()
    job = job or Job.objects.order_by("id").first()
    assert job is not None
    exc = PriorityException.objects.order_by("id").first()
    assert exc is not None
    # The busiest of each: the workload with most runs, an open decision of its team,
    # the agreement with promises.
    workload = Workload.objects.filter(team=share.team, name__endswith="/finetune").get()
    decision = Decision.objects.filter(state=DecisionState.OPEN, team=share.team).first()
    assert decision is not None
    agreement = Agreement.objects.filter(promises__isnull=False).order_by("id").first()
    assert agreement is not None
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
        ("page", "agreement", f"/agreements/{agreement.pk}/"),
        ("page", "teams", "/teams/"),
        ("page", "team", f"/teams/{share.team_id}/"),
        ("page", "workload", f"/workloads/{workload.pk}/"),
        ("page", "decision", f"/decisions/{decision.pk}/"),
        ("page", "signals", f"/signals/?queue={fleet.pk}"),
        ("page", "share ledger", f"/shares/{share.pk}/ledger/"),
        ("page", "plans", "/plans/"),
        ("page", "change requests", "/change-requests/"),
        ("page", "notifications", "/notifications/"),
        ("partial", "overview usage", "/partials/usage/"),
        ("partial", "overview feed", "/partials/feed/"),
        ("partial", "queue usage", f"/queues/{fleet.pk}/partials/usage/"),
        ("partial", "job status", f"/jobs/{job.pk}/partials/status/"),
    ]


# ---------------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(worker_class: str) -> tuple[subprocess.Popen[bytes], int]:
    """gunicorn serving the project on a free local port; returns once it answers."""
    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()  # a cold, private cache
    port = _free_port()
    workers = 2 * (os.cpu_count() or 1) + 1
    command = [
        str(ROOT / ".venv" / "bin" / "gunicorn"),
        "governance.wsgi:application",
        f"--bind=127.0.0.1:{port}",
        f"--workers={workers}",
        f"--worker-class={worker_class}",
        "--backlog=2048",
        "--timeout=120",
        "--log-level=warning",
    ]
    if worker_class == "gthread":
        command.append("--threads=4")
    # The 20 clients sign in at once from one address: above the sign-in throttle.
    env = {
        **os.environ,
        "DEBUG": "false",
        "DB_CONN_MAX_AGE": "60",
        "THROTTLE_SIGN_IN_RATE": "1000/min",
    }
    env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    server = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    deadline = time.monotonic() + 120  # a busy machine starts workers slowly
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"gunicorn exited with {server.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/login/")
            conn.getresponse().read()
            conn.close()
            say(f"gunicorn on 127.0.0.1:{port}: {workers} {worker_class} workers")
            return server, port
        except OSError:
            time.sleep(0.2)
    stop_server(server)
    sys.exit("gunicorn did not answer within 120 s")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """Stop the gunicorn this bench started (its own process group, by id)."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


# ---------------------------------------------------------------------- the clients


class Session:
    """One browser: an HTTP connection and its cookies, signed in through the form."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.cookies: dict[str, str] = {}

    def _send(
        self, method: str, url: str, body: str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, str, float | None, bytes]:
        all_headers = {"Host": "127.0.0.1", **(headers or {})}
        if self.cookies:
            all_headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        try:
            self.conn.request(method, url, body=body, headers=all_headers)
            response = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self.conn.close()  # the server closed an idle connection: reconnect once
            self.conn.request(method, url, body=body, headers=all_headers)
            response = self.conn.getresponse()
        data = response.read()
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key.strip()] = rest.split(";", 1)[0]
        match = TIMING.search(response.getheader("Server-Timing") or "")
        server_ms = float(match.group(1)) if match else None
        return response.status, response.getheader("Location") or "", server_ms, data

    def login(self, username: str, password: str) -> None:
        status, _, _, page = self._send("GET", "/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert status == 200 and token, "no login form"
        body = urlencode(
            {
                "csrfmiddlewaretoken": token.group(1).decode(),
                "username": username,
                "password": password,
                "next": "/",
            }
        )
        status, location, _, _ = self._send(
            "POST",
            "/login/",
            body,
            {"Content-Type": "application/x-www-form-urlencoded", "Referer": "http://127.0.0.1/"},
        )
        assert status == 302 and "login" not in location, f"sign-in failed ({status})"

    def get(self, url: str, headers: dict[str, str]) -> tuple[int, float | None, float]:
        started = time.perf_counter()
        status, _, server_ms, _ = self._send("GET", url, headers=headers)
        return status, server_ms, (time.perf_counter() - started) * 1000


Sample = tuple[str, float, float, int]  # label, server ms, client ms, status


def _client_run(
    port: int,
    targets: list[tuple[str, str, str]],
    rounds: int,
    seed: int,
    barrier: threading.Barrier | None,
    out: list[Sample],
) -> None:
    session = Session(port)
    session.login("admin", "admin")
    rng = random.Random(seed)
    for _, _label, url in targets:  # warm-up: not counted
        session.get(url, {})
    if barrier is not None:
        barrier.wait()
    mine: list[Sample] = []
    for _ in range(rounds):
        order = targets[:]
        rng.shuffle(order)
        for _, label, url in order:
            headers = {"HX-Request": "true"} if "/partials/" in url else {}
            status, server_ms, client_ms = session.get(url, headers)
            mine.append((label, server_ms if server_ms is not None else -1.0, client_ms, status))
    out.extend(mine)


def measure(
    port: int, targets: list[tuple[str, str, str]], rounds: int, clients: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``clients`` threads request every URL ``rounds`` times; (server, client) ms by label."""
    out: list[Sample] = []
    barrier = threading.Barrier(clients) if clients > 1 else None
    threads = [
        threading.Thread(target=_client_run, args=(port, targets, rounds, i, barrier, out))
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    server: dict[str, list[float]] = {label: [] for _, label, _ in targets}
    client: dict[str, list[float]] = {label: [] for _, label, _ in targets}
    errors = []
    for label, server_ms, client_ms, status in out:
        server[label].append(server_ms)
        client[label].append(client_ms)
        if status != 200 or server_ms < 0:
            errors.append(f"{label}: {status}")
    if errors:
        say(f"{len(errors)} bad responses, e.g. {sorted(set(errors))[:5]}")
    return server, client


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def report(
    targets: list[tuple[str, str, str]],
    server: dict[str, list[float]],
    client: dict[str, list[float]],
    solo: dict[str, list[float]],
) -> bool:
    ok_all = True
    print()
    print(
        f"{'kind':<8} {'view':<17} {'url':<34} {'solo':>6} | {'server':>6} {'server':>6} | "
        f"{'client':>6} {'client':>6} | {'target':>6}  ok"
    )
    print(
        f"{'':<8} {'':<17} {'':<34} {'p50':>6} | {'p50':>6} {'p95':>6} | "
        f"{'p50':>6} {'p95':>6} | {'p95':>6}"
    )
    print("-" * 112)
    for kind, label, url in targets:
        values = server[label]
        target = PAGE_TARGET_MS if kind == "page" else PARTIAL_TARGET_MS
        p95 = pct(values, 95)
        ok = p95 <= target
        ok_all &= ok
        print(
            f"{kind:<8} {label:<17} {url[:34]:<34} {statistics.median(solo[label]):>6.1f} | "
            f"{statistics.median(values):>6.1f} {p95:>6.1f} | "
            f"{statistics.median(client[label]):>6.1f} {pct(client[label], 95):>6.1f} | "
            f"{target:>6.0f}  {'yes' if ok else 'NO'}"
        )
    return ok_all


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, 50,000 audit entries")
    parser.add_argument("--reuse", action="store_true", help="keep the previous bench_web data")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per client")
    parser.add_argument("--worker-class", choices=("sync", "gthread"), default="sync")
    args = parser.parse_args()
    jobs_total, audit_total = (5_000, 50_000) if args.quick else (50_000, 500_000)
    rounds = args.rounds or (3 if args.quick else 5)
    _setup_environment(args.reuse)
    from governance.models import Job

    if not (args.reuse and Job.objects.exists()):
        load(jobs_total, audit_total)
    else:
        say(f"reusing {BENCH_DB}: {Job.objects.count():,} jobs")
    targets = urls()
    from django.db import connections

    connections.close_all()
    server_proc, port = start_server(args.worker_class)
    try:
        say(f"1 client x {rounds} rounds x {len(targets)} URLs (uncontended reference)")
        solo, _ = measure(port, targets, rounds, 1)
        say(f"{CLIENTS} clients x {rounds} rounds x {len(targets)} URLs")
        started = time.perf_counter()
        server, client = measure(port, targets, rounds, CLIENTS)
        wall = time.perf_counter() - started
    finally:
        stop_server(server_proc)
    print(
        f"\nbench/web.py: {Job.objects.count():,} jobs; gunicorn "
        f"{2 * (os.cpu_count() or 1) + 1} {args.worker_class} workers on {os.cpu_count()} CPUs; "
        f"{CLIENTS} client threads with own sessions over HTTP on 127.0.0.1. server = "
        "Server-Timing app;dur (request in Django); client = wall time seen by the client "
        "(includes waiting for a free worker); solo = server p50 of one client alone. ms."
    )
    ok = report(targets, server, client, solo)
    total = sum(len(v) for v in server.values())
    rate = total / wall
    rate_ok = rate >= RATE_TARGET
    print(
        f"\n{total} requests in {wall:.1f} s: {rate:.0f} req/s under load "
        f"(target >= {RATE_TARGET:.0f}: {'ok' if rate_ok else 'missed'})"
    )
    print("all targets met" if ok and rate_ok else "some targets NOT met")


if __name__ == "__main__":
    main()
