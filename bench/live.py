"""Live scheduling benchmarks: cycle time, submit-to-admitted latency, agent makespan.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything \\
    BENCH_REDIS_URL=redis://127.0.0.1:6379/9 .venv/bin/python bench/live.py [--quick]

Everything runs in a throwaway database ``bench_live_<name>`` (``<name>`` being the
database named in ``DATABASE_URL``, so engineers benchmarking side by side do not drop
each other's) on the ``DATABASE_URL`` server (dropped and re-created each run) and a
Redis database of its own (``BENCH_REDIS_URL``,
flushed at start: give it one nobody else uses). Parts:

1. ``cycle``: one persisted ``run_cycle`` of a queue holding 10,000 pending and
   5,000 running jobs (bulk-created), target <= 1 s;
2. ``latency``: jobs submitted over HTTP to the API (served by gunicorn with
   ``scripts/gunicorn_conf.py``, as deployed: ``WEB_CONCURRENCY`` x ``WEB_THREADS``,
   2 x 8 unless set) at a steady ``--rate`` per second (200) for a minute (``--quick``:
   10 s) with a real Celery worker, on a queue that has run ``--history`` jobs before
   (20,000 finished jobs, the statistics analysed, as on a site in service; ``0``: a new
   site's empty database, whose first minute runs on plans made for empty tables).
   The client is open loop: submission ``i`` is sent at
   ``start + i / rate`` whatever the server's pace, by several processes of several
   threads, so a slow server shows as late sends and latency, not as a lower offered
   rate. Submit-to-admitted latency is the job's ``admitted`` event time minus
   ``submitted_at``; targets p95 <= 50 ms, and the POST's answer p95 <= 100 ms; nothing
   lost (every POST answered 201, every job stored and admitted). Then where a
   submission's time went, per job: CPU of the web server's processes and of the
   worker, CPU of the bench database's PostgreSQL sessions (the server must run on this
   machine for that figure, and ``psutil`` must be able to read its processes), the
   statements' wall time in PostgreSQL (``pg_stat_database.active_time``, lock and CPU
   waits included) and how busy the machine was: at a rate the server cannot reach
   these say which part bounds it. ``--profile-post N``
   then profiles N submissions in this process (Django's test client, no gunicorn) and
   prints where a POST spends its time;
3. ``makespan``: 480 one-second jobs on a queue of 16 single-GPU instances run by
   ``examples/agent.py`` over HTTP (gunicorn), ideal 30 s, target 33 s (at most 100 ms
   of overhead per job start).

``--seconds S`` sets the latency run's length; ``BENCH_WORKER_LOGLEVEL=INFO`` makes the
worker log each task with its time (in ``BENCH_LOG_DIR``, default /tmp/bench_live_logs).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from throwaway import django_on_throwaway

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "bench_live"  # suffixed with DATABASE_URL's database name at start
G5, P4 = "ml.g5.xlarge", "ml.p4d.24xlarge"


def _setup_environment() -> tuple[str, str]:
    """Point this process at the throwaway database and private Redis before Django loads."""
    global BENCH_DB
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    BENCH_DB, bench_url = django_on_throwaway(
        "bench_live", REDIS_URL=redis_url, CELERY_TASK_ALWAYS_EAGER="false"
    )
    return bench_url, redis_url


def heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 70 - len(text)), flush=True)


def figure(label: str, value: str, target: str = "", ok: bool | None = None) -> None:
    verdict = "" if ok is None else ("  OK" if ok else "  MISSED")
    target_text = f"   (target {target})" if target else ""
    print(f"  {label:<44} {value:>12}{target_text}{verdict}", flush=True)


# ----------------------------------------------------------------------------- fixtures


def _types() -> dict[str, object]:
    from governance.models import InstanceType

    return {
        G5: InstanceType.objects.get_or_create(name=G5, defaults={"accelerators": 1})[0],
        P4: InstanceType.objects.get_or_create(name=P4, defaults={"accelerators": 8})[0],
    }


def _user(username: str, *groups: str) -> object:
    from django.contrib.auth.models import Group, User

    user, _ = User.objects.get_or_create(username=username)
    user.set_password(username)
    user.save()
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def _queue(name: str, capacity: dict[str, int], executor: str = "simulated") -> object:
    from governance.models import JobQueue, QueueCapacity

    types = _types()
    queue = JobQueue.objects.create(name=name, executor=executor)
    for type_name, count in capacity.items():
        QueueCapacity.objects.create(queue=queue, instance_type=types[type_name], count=count)
    return queue


def _share(queue: object, team_name: str, limits: dict[str, int], **fields: object) -> object:
    from governance.models import Share, ShareLimit, Team

    types = _types()
    team = Team.objects.get_or_create(name=team_name)[0]
    share = Share.objects.create(queue=queue, team=team, name=team_name, **fields)
    for type_name, count in limits.items():
        ShareLimit.objects.create(share=share, instance_type=types[type_name], count=count)
    return share


# ----------------------------------------------------------------------------- 1. cycle


def bench_cycle() -> None:
    from cycle import build  # bench/cycle.py: the same queue its full-read figures use

    from governance.models import Job, JobState, QueueCapacity
    from scheduler.cycle.run import run_cycle

    heading("1. persisted cycle: 10,000 pending + 5,000 running")
    shares_n, g5_each, p4_each = 20, 150, 100
    queue = build("bench-cycle", 500, g5_each, p4_each)
    types = _types()
    counts = {s: Job.objects.filter(queue=queue, state=s).count() for s in JobState.values}
    print(f"  jobs: {counts[JobState.PENDING]} pending, {counts[JobState.RUNNING]} running")

    timings = []
    for _ in range(5):
        started = time.perf_counter()
        result = run_cycle(queue.pk)
        timings.append(time.perf_counter() - started)
        assert result.admitted == 0 and result.preempted == 0, result
    best, median = min(timings), statistics.median(timings)
    figure(
        "cycle, nothing to decide (median of 5)",
        f"{median * 1000:.0f} ms",
        "<= 1000 ms",
        median <= 1.0,
    )
    figure("cycle, nothing to decide (best)", f"{best * 1000:.0f} ms")

    # Free 50 instances: the next cycle admits 50 jobs through the services.
    QueueCapacity.objects.filter(queue=queue, instance_type=types[G5]).update(
        count=shares_n * g5_each + 50
    )
    started = time.perf_counter()
    result = run_cycle(queue.pk)
    elapsed = time.perf_counter() - started
    figure(
        f"cycle admitting {result.admitted} jobs",
        f"{elapsed * 1000:.0f} ms",
        "<= 1000 ms",
        elapsed <= 1.0,
    )
    if median > 1.0 and os.environ.get("BENCH_PROFILE"):
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        run_cycle(queue.pk)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


# ------------------------------------------------------------------------ processes


@contextmanager
def process(
    command: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def worker_command(name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "governance",
        "worker",
        "--pool",
        "solo",
        "--loglevel",
        os.environ.get("BENCH_WORKER_LOGLEVEL", "WARNING"),
        "--hostname",
        name,
        "--without-heartbeat",
        "--without-mingle",
        "--without-gossip",
    ]


def wait_for_worker(name: str) -> None:
    from governance.celery import app

    deadline = time.monotonic() + 60
    while not app.control.ping(destination=[name], timeout=0.5):
        if time.monotonic() > deadline:
            sys.exit("the Celery worker did not start")


# ---------------------------------------------------------------------------- 2. latency


SUBMIT_PROCESSES, SUBMIT_THREADS = 2, 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def web_command(port: int) -> list[str]:
    """The API as deployed: gunicorn with ``scripts/gunicorn_conf.py`` (threaded workers,
    ``WEB_CONCURRENCY`` x ``WEB_THREADS``; see ``web_env``). Three sync workers, which
    this bench ran before, answered one request per process at a time: at 200/s they
    left most of a POST's wait on PostgreSQL unshared and answered 17 submissions/s."""
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        str(ROOT / "scripts" / "gunicorn_conf.py"),
        "governance.wsgi:application",
    ]


def web_env(env: dict[str, str], port: int) -> dict[str, str]:
    """The web server's environment: this port, no access log, the deployed defaults
    for processes and threads unless ``WEB_CONCURRENCY``/``WEB_THREADS`` are set."""
    return dict(
        env,
        WEB_BIND="127.0.0.1",
        PORT=str(port),
        WEB_ACCESS_LOG="0",
        WEB_LOG_LEVEL="warning",
    )


class CpuMeter:
    """CPU seconds used between ``start`` and ``stop`` by the processes ``find`` names:
    a process and its children (gunicorn's workers, the Celery worker), or the
    PostgreSQL sessions of one database. Sampled twice a second, so a process that
    ends meanwhile (gunicorn recycles its workers, a connection is closed) still
    counts up to its last sample."""

    def __init__(self, find: Callable[[], list[Any]]) -> None:
        import threading

        self.find = find
        self.before: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.used = 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict[int, float]:
        import psutil

        seen: dict[int, float] = {}
        for proc in self.find():
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            seen[proc.pid] = times.user + times.system
        return seen

    def _run(self) -> None:
        while not self.done.wait(0.5):
            self.last.update(self._sample())

    def start(self) -> None:
        self.before = self._sample()
        self.last = dict(self.before)
        self.thread.start()

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        self.last.update(self._sample())
        self.used = sum(t - self.before.get(pid, 0.0) for pid, t in self.last.items())
        return self.used


def process_tree(pid: int) -> Callable[[], list[Any]]:
    """``CpuMeter``'s finder of a process and its children."""
    import psutil

    root = psutil.Process(pid)
    return lambda: [root, *root.children(recursive=True)]


def database_sessions(name: str) -> Callable[[], list[Any]]:
    """``CpuMeter``'s finder of the PostgreSQL sessions of database ``name`` (the server
    runs on this machine: a session is a process titled ``postgres: ... <database> ...``)."""
    import psutil

    def find() -> list[Any]:
        found = []
        # by name first: reading every process's command line twice a second cost the
        # machine under test more than the figure is worth
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] != "postgres":
                continue
            try:
                words = " ".join(proc.cmdline()).split()
            except psutil.Error:
                continue
            if words[:1] == ["postgres:"] and name in words:
                found.append(proc)
        return found

    return find


def database_activity(name: str) -> tuple[float, int]:
    """Milliseconds PostgreSQL spent running statements in database ``name`` and its
    committed transactions so far (``pg_stat_database``, sessions flush it about every
    second)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT active_time, xact_commit FROM pg_stat_database WHERE datname = %s", [name]
        )
        row = cursor.fetchone()
    return float(row[0] or 0.0), int(row[1] or 0)


def wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            sys.exit("the web server did not start")
        time.sleep(0.1)


def _submit_slots(
    port: int,
    token: str,
    payload: bytes,
    started: float,
    rate: int,
    first: int,
    step: int,
    total: int,
) -> tuple[int, list[float], float]:
    """Send submissions ``first``, ``first + step``, ... each at its fixed time (open loop).

    Threads take the next slot in turn, so a slow answer delays no later send while a
    thread is free. Each submission is a new connection, as from independent clients.
    The request is written as bytes and the answer read to the server's close, rather
    than through ``http.client`` (which parses headers with the ``email`` package): the
    load generator shares the server's two cores, and every millisecond of its CPU is
    one the server does not get. Returns how many were sent over 100 ms late, the
    response times and the CPU seconds this process used.
    """
    import threading

    cpu_started = time.process_time()
    slots = iter(range(first, total, step))
    lock = threading.Lock()
    late = [0]
    times: list[float] = []
    failures: list[str] = []
    request = (
        f"POST /api/jobs/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Token {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload

    def sender() -> None:
        while True:
            with lock:
                i = next(slots, None)
            if i is None:
                return
            pause = started + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            elif pause < -0.1:
                with lock:
                    late[0] += 1
            sent = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
                conn.sendall(request)
                chunks = []
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
            answer = b"".join(chunks)
            if not answer.startswith(b"HTTP/1.1 201 "):
                failures.append(repr(answer[:300]))
            with lock:
                times.append(time.monotonic() - sent)

    threads = [threading.Thread(target=sender) for _ in range(SUBMIT_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[:3]
    return late[0], times, time.process_time() - cpu_started


def _history(queue: Any, share: Any, user: Any, jobs: int) -> int:
    """``jobs`` finished jobs the queue ran before (a day's worth, spread back from an hour
    ago), then the database's statistics analysed, as autovacuum keeps them on a site in
    service; returns the last one's id (the run's jobs come after it).

    PostgreSQL plans a statement for the tables as its statistics describe them, and keeps
    the plan of a prepared statement. On an empty database that autovacuum has not yet
    visited (it does once a minute), a connection's plans are those of tables of a few
    rows, and some stay so while the run fills them: the first minute of a new site, not
    the state a site in service runs in."""
    from django.db import connection
    from django.utils import timezone

    from governance.models import Job, JobState

    now = timezone.now()
    Job.objects.bulk_create(
        (
            Job(
                queue=queue,
                share=share,
                submitter=user,
                name="history",
                duration=30,
                work_done=30,
                checkpoint_work=30,
                preferences=[{"instance_type": G5, "count": 1}],
                state=JobState.SUCCEEDED,
                submitted_at=(at := now - timedelta(hours=1, seconds=86400 * i / jobs)),
                started_at=at,
                finished_at=at + timedelta(seconds=30),
            )
            for i in range(jobs)
        ),
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    last = Job.objects.filter(queue=queue).order_by("-pk").values_list("pk", flat=True).first()
    return int(last or 0)


def bench_latency(seconds: float, env: dict[str, str], logs: Path, rate: int, history: int) -> None:
    from knox.models import AuthToken

    from governance.models import Job, JobEvent, Membership

    heading(f"2. submit-to-admitted latency, {rate}/s for {seconds:g} s (API + real worker)")
    # Jobs of 30 simulated seconds finish in 0.5 s at 60x: the queue keeps turning over.
    queue = _queue("bench-latency", {G5: 200})
    share = _share(queue, "latency-team", {G5: 200})
    user = _user("latency-lead")
    Membership.objects.get_or_create(team=share.team, user=user, defaults={"role": "lead"})
    _, token = AuthToken.objects.create(user=user)
    after = _history(queue, share, user, history) if history else 0
    print(
        f"  the queue's history: {history} finished jobs, statistics analysed"
        if history
        else "  a new site: empty tables, statistics as autovacuum finds them"
    )
    runs = Job.objects.filter(queue=queue, pk__gt=after)  # this run's submissions
    name = f"bench-latency-{os.getpid()}@{os.uname().nodename}"
    port = free_port()
    with (
        process(
            worker_command(name), dict(env, DEMO_TIME_FACTOR="60"), logs / "worker.log"
        ) as worker,
        process(web_command(port), web_env(env, port), logs / "web-latency.log") as web,
    ):
        wait_for_worker(name)
        wait_for_port(port)
        body = {
            "queue": queue.pk,
            "share": share.pk,
            "name": "j",
            "duration": 30,
            "preferences": [{"instance_type": G5, "count": 1}],
        }
        total = int(seconds * rate)
        import json

        from django.db import connections

        connections.close_all()
        import psutil

        web_cpu, worker_cpu = CpuMeter(process_tree(web.pid)), CpuMeter(process_tree(worker.pid))
        pg_cpu = CpuMeter(database_sessions(BENCH_DB))
        time.sleep(1.5)  # sessions report their statistics about every second
        db_before = database_activity(BENCH_DB)
        cpu_before = psutil.cpu_times()
        web_cpu.start()
        worker_cpu.start()
        pg_cpu.start()
        started = time.monotonic() + 0.5
        context = multiprocessing.get_context("fork")
        payload = json.dumps(body).encode()
        with context.Pool(SUBMIT_PROCESSES) as pool:
            results = pool.starmap(
                _submit_slots,
                [
                    (port, token, payload, started, rate, i, SUBMIT_PROCESSES, total)
                    for i in range(SUBMIT_PROCESSES)
                ],
            )
        late = sum(r[0] for r in results)
        answers = sorted(t * 1000 for r in results for t in r[1])
        submit_wall = time.monotonic() - started
        deadline = time.monotonic() + 30
        while runs.filter(started_at__isnull=True).exists():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        web_cpu.stop()
        worker_cpu.stop()
        pg_cpu.stop()
        cpu_after = psutil.cpu_times()
        time.sleep(1.5)
        db_after = database_activity(BENCH_DB)
    submitted = dict(runs.values_list("id", "submitted_at"))
    admitted: dict[int, object] = {}
    for job_id, at in (
        JobEvent.objects.filter(job__queue=queue, job__pk__gt=after, type="admitted")
        .order_by("at")
        .values_list("job_id", "at")
    ):
        admitted.setdefault(job_id, at)
    figure("achieved submission rate", f"{len(submitted) / submit_wall:.1f}/s", f"{rate}/s")
    figure("POSTs answered 201", f"{len(answers)}/{total}", str(total), len(answers) == total)
    figure("jobs stored", f"{len(submitted)}/{total}", str(total), len(submitted) == total)
    post_p95 = answers[min(len(answers) - 1, int(len(answers) * 0.95))]
    figure("POST /api/jobs/ answer p50", f"{answers[len(answers) // 2]:.0f} ms")
    figure("POST /api/jobs/ answer p95", f"{post_p95:.0f} ms", "<= 100 ms", post_p95 <= 100)
    latencies = sorted(
        (admitted[j] - submitted[j]).total_seconds() * 1000
        for j in admitted  # type: ignore[operator]
    )
    never = len(submitted) - len(admitted)
    print(
        f"  submitted {len(submitted)} in {submit_wall:.1f} s "
        f"({len(submitted) / submit_wall:.1f}/s, {late} submissions >100 ms behind schedule)"
    )
    busy = sum(cpu_after) - sum(cpu_before)
    idle = (cpu_after.idle + cpu_after.iowait) - (cpu_before.idle + cpu_before.iowait)
    print("  where a submission's time goes (per job stored):")
    per_job = max(1, len(submitted))
    figure("  web server CPU (gunicorn workers)", f"{web_cpu.used / per_job * 1000:.1f} ms")
    figure("  Celery worker CPU (cycles, admissions)", f"{worker_cpu.used / per_job * 1000:.1f} ms")
    figure("  PostgreSQL CPU (the bench DB's sessions)", f"{pg_cpu.used / per_job * 1000:.1f} ms")
    client_cpu = sum(r[2] for r in results)
    figure("  this bench's clients' CPU (not the product)", f"{client_cpu / per_job * 1000:.1f} ms")
    figure(
        "  PostgreSQL statements (wall, waits too)",
        f"{(db_after[0] - db_before[0]) / per_job:.1f} ms",
    )
    figure("  transactions committed", f"{(db_after[1] - db_before[1]) / per_job:.1f}")
    figure(
        "  machine CPU busy (all processes)",
        f"{(busy - idle) / max(busy, 1e-9) * 100:.0f}% of {os.cpu_count()}",
    )
    figure("  load average (1 min) at the end", f"{os.getloadavg()[0]:.1f}")
    if not latencies:
        figure("admitted", "none", "all", False)
        return
    p50 = latencies[len(latencies) // 2]
    p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))]
    figure("p50 submit-to-admitted", f"{p50:.0f} ms")
    figure("p95 submit-to-admitted", f"{p95:.0f} ms", "<= 50 ms", p95 <= 50)
    figure("max submit-to-admitted", f"{latencies[-1]:.0f} ms")
    figure("never admitted", str(never), "0", never == 0)


def profile_post(count: int) -> None:
    """Where a POST /api/jobs/ spends its time: ``count`` submissions through Django's test
    client in this process (the view, the service, the transaction and its commit with the
    audit seal; no gunicorn, no network), profiled; the top functions by cumulative time."""
    import cProfile
    import json
    import pstats

    from django.test import Client
    from knox.models import AuthToken

    from governance.models import Membership

    heading(f"2b. profile of {count} POST /api/jobs/ in-process")
    queue = _queue("bench-profile", {G5: 10})
    share = _share(queue, "profile-team", {G5: 10})
    user = _user("profile-lead")
    Membership.objects.get_or_create(team=share.team, user=user, defaults={"role": "lead"})
    _, token = AuthToken.objects.create(user=user)
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    body = json.dumps(
        {
            "queue": queue.pk,
            "share": share.pk,
            "name": "p",
            "duration": 30,
            "preferences": [{"instance_type": G5, "count": 1}],
        }
    )
    for _ in range(20):  # warm: imports, caches, the connection
        client.post("/api/jobs/", body, content_type="application/json")
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for _ in range(count):
        response = client.post("/api/jobs/", body, content_type="application/json")
        assert response.status_code == 201, response.content[:200]
    profiler.disable()
    took = time.perf_counter() - started
    figure("in-process POST, mean (profiled)", f"{took / count * 1000:.1f} ms")
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(15)


# --------------------------------------------------------------------------- 3. makespan


def bench_makespan(env: dict[str, str], logs: Path) -> None:
    from django.db.models import Max, Min
    from django.utils import timezone
    from knox.models import AuthToken

    from governance.models import Job, JobState
    from scheduler import triggers

    jobs_n, slots = 480, 16
    heading(f"3. makespan: {jobs_n} one-second jobs, {slots} single-GPU instances, agent.py")
    # Tasks the latency part's worker left in the broker (follow-up timers, a last cycle
    # request) would run first and delay the first admission: start from an empty broker.
    import redis

    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    queue = _queue("bench-agents", {G5: slots}, "agent")
    share = _share(queue, "agent-team", {G5: slots})
    user = _user("bench-submitter")
    agent_user = _user("bench-agent", "agent")
    _, token = AuthToken.objects.create(user=agent_user)
    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            queue=queue,
            share=share,
            submitter=user,
            name=f"one-second-{i}",
            duration=1,
            preferences=[{"instance_type": G5, "count": 1}],
            submitted_at=now + timedelta(microseconds=i),
        )
        for i in range(jobs_n)
    )
    port = free_port()
    name = f"bench-agents-{os.getpid()}@{os.uname().nodename}"
    with (
        process(worker_command(name), env, logs / "worker-agents.log"),
        process(web_command(port), web_env(env, port), logs / "web.log"),
    ):
        wait_for_worker(name)
        wait_for_port(port)
        agent = [
            sys.executable,
            "examples/agent.py",
            "--url",
            f"http://127.0.0.1:{port}",
            "--token",
            token,
            "--queue",
            str(queue.pk),
            "--name",
            "bench-agent",
            "--slots",
            str(slots),
            "--speedup",
            "1",
            "--until-idle",
            "30",
        ]
        with process(agent, env, logs / "agent.log") as agent_proc:
            time.sleep(0.5)  # the agent is polling before the first job is admitted
            t0 = timezone.now()
            triggers.request_cycle(queue.pk)
            deadline = time.monotonic() + 180
            while Job.objects.filter(
                queue=queue, state__in=(JobState.PENDING, JobState.RUNNING)
            ).exists():
                if time.monotonic() > deadline or agent_proc.poll() is not None:
                    break
                time.sleep(0.2)
    done = Job.objects.filter(queue=queue, state=JobState.SUCCEEDED)
    span = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
    count = done.count()
    if count == 0:
        figure("completed", "0", str(jobs_n), False)
        return
    makespan = (span["last"] - t0).total_seconds()
    ideal = jobs_n / slots * 1.0
    overhead = (makespan - ideal) * slots / jobs_n * 1000
    figure("jobs completed", f"{count}/{jobs_n}", str(jobs_n), count == jobs_n)
    figure(
        "makespan",
        f"{makespan:.2f} s",
        f"<= {ideal + jobs_n * 0.1 / slots:.0f} s (ideal {ideal:.0f} s)",
        makespan <= ideal + jobs_n * 0.1 / slots,
    )
    figure("overhead per job start", f"{overhead:.0f} ms", "<= 100 ms", overhead <= 100)
    print(f"  (logs in {logs})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="latency run of 10 s, not 60 s")
    parser.add_argument("--rate", type=int, default=200, help="submissions per second")
    parser.add_argument(
        "--seconds", type=float, default=0.0, help="latency run of this many seconds"
    )
    parser.add_argument(
        "--history",
        type=int,
        default=20000,
        metavar="N",
        help="finished jobs in the latency run's queue before it starts, statistics analysed"
        " (a site in service); 0: a new site's empty database",
    )
    parser.add_argument(
        "--profile-post", type=int, default=0, metavar="N", help="profile N POSTs in-process"
    )
    parser.add_argument(
        "--only",
        choices=["cycle", "latency", "profile", "makespan"],
        action="append",
        help="run only these parts (repeatable)",
    )
    args = parser.parse_args()
    bench_url, redis_url = _setup_environment()
    # Servers and workers keep their database connection (``DB_CONN_MAX_AGE``, as deployed):
    # a new connection per request or task cost more than the request itself.
    env = dict(
        os.environ,
        DATABASE_URL=bench_url,
        REDIS_URL=redis_url,
        LOG_LEVEL=os.environ.get("BENCH_WORKER_LOGLEVEL", "WARNING"),
        DB_CONN_MAX_AGE="60",
    )
    logs = Path(os.environ.get("BENCH_LOG_DIR", "/tmp/bench_live_logs"))
    logs.mkdir(parents=True, exist_ok=True)
    parts = args.only or ["cycle", "latency", "makespan"]
    print(f"database {BENCH_DB}, redis {redis_url}, {os.cpu_count()} CPUs")
    if "cycle" in parts:
        bench_cycle()
    if "latency" in parts:
        seconds = args.seconds or (10.0 if args.quick else 60.0)
        bench_latency(seconds, env, logs, args.rate, args.history)
    if args.profile_post or "profile" in parts:
        profile_post(args.profile_post or 300)
    if "makespan" in parts:
        bench_makespan(env, logs)


if __name__ == "__main__":
    main()
