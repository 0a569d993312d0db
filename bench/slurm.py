"""The same work through Slurm alone and through the product on the same local Slurm.

    ./scripts/slurm/start
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything SLURM_CONF=var/slurm/slurm.conf \\
        .venv/bin/python bench/slurm.py [--a-jobs 480] [--a-repeat 1] [--b-jobs 2000] [--no-hook] \\
        [--busy]

Runs in a throwaway database ``bench_slurm_<name>`` (dropped and re-created). The product
side drives the slurm executor's passes (``pass_.sync_queue``: what beat's ``slurm-sync``
task does) back to back in this process; Slurm runs every job. Unless ``--no-hook``, the
product's web app also serves in this process (a thread on a free port) and the local
Slurm's completion hook is turned on for the run (``scripts/slurm/hook``): each job's
epilog calls the product, whose pass submits what runs next before the epilog releases the
node (docs/slurm.md). Prints:

(a) ``--a-jobs`` one-second single-GPU jobs on the 16 GPUs: makespan and overhead per job
    start (makespan x GPUs / jobs - 1 s) of Slurm alone and of the product. Both are timed
    from the first submission, and on both sides the jobs are submitted one by one while
    the jobs submitted first already run (``sbatch`` calls for Slurm alone; for the
    product, ``job_submit`` calls from a thread of their own, as users' API calls would
    arrive while the executor works);
(b) ``--b-jobs`` jobs of 1 to 8 GPUs from four teams' shares (4 GPUs each): team A
    submits half of them at once and borrows whatever is idle; B, C and D each keep one
    job within their own limit submitted (the next when the last ends), so each of their
    jobs takes its GPUs back from A: time until all are placed, and reclaim latency (an
    owner's submission to its Slurm job running, as Slurm's start time says, 1 s
    resolution) p50/p95 over the jobs that reclaimed;
(c) completion to next start: for each Slurm job start after the first wave, the time
    the GPU it takes stood idle since the job before it on that GPU ended (first freed,
    first reused; Slurm's own end/start times, 1 s resolution), p50/p95, for both runs
    of (a).

Targets: (a) at most 1.15 x on a quiet machine and at most 1.25 x with ``--busy`` (a
second process keeps one core busy throughout, on both sides), (b) p95 at most 3 s, (c)
p95 at most 1 s.

With ``--a-repeat N``, (a) and (c) run N times one after the other, and the median, lowest
and highest ratio follow: on a small shared machine one run's ratio moves by several
percent from run to run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from throwaway import django_on_throwaway

ROOT = Path(__file__).resolve().parent.parent
TYPE = "ml.g5.bench"
GPUS = 16


def _setup() -> None:
    django_on_throwaway(
        "bench_slurm",
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
        SLURM_CONF=os.environ.get("SLURM_CONF") or str(ROOT / "var/slurm/slurm.conf"),
        SLURM_OUTPUT_DIR="/tmp/bench-slurm/out",
        SLURM_CHECKPOINT_DIR="/tmp/bench-slurm/ckpt",
    )


class Hook:
    """The product's web server (gunicorn with the project's settings, on a free local
    port, as ./scripts/run starts it) and the local Slurm's completion hook pointed at it
    while ``on`` (Slurm alone runs with it off)."""

    def __init__(self) -> None:
        from django.conf import settings

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.token = secrets.token_urlsafe(24)
        settings.SLURM_HOOK_TOKEN = self.token
        env = dict(
            os.environ,
            SLURM_HOOK_TOKEN=self.token,
            SLURM_JOB_PREFIX=settings.SLURM_JOB_PREFIX,
            PORT=str(port),
            WEB_BIND="127.0.0.1",
            WEB_ACCESS_LOG="0",
            WEB_LOG_LEVEL="warning",
            # Kept connections, as ./scripts/run and every benchmark run the web server.
            DB_CONN_MAX_AGE="60",
            # No collected static files here: whitenoise's warning says nothing useful.
            PYTHONWARNINGS="ignore::UserWarning",
        )
        conf = str(ROOT / "scripts" / "gunicorn_conf.py")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", conf, "governance.wsgi"], cwd=ROOT, env=env
        )
        self.url = f"http://127.0.0.1:{port}/api/slurm/job-ended/"
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if self.server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the product's web server did not start") from None
                time.sleep(0.2)
        self.script = str(ROOT / "scripts" / "slurm" / "hook")

    def on(self) -> None:
        subprocess.run([self.script, self.url, self.token], check=True, capture_output=True)

    def off(self) -> None:
        subprocess.run([self.script, "--off"], check=True, capture_output=True)

    def close(self) -> None:
        self.off()
        self.server.terminate()
        self.server.wait(timeout=30)


def rotate_completion_log(cli: Any) -> None:
    """Start from an empty completion log: the executor reads the final state of each
    ended job from it with ``sacct -c``, which reads the whole file, so on the local
    cluster (whose log only grows) each run would otherwise be slower than the last. The
    old entries go to ``<log>.1``; Slurm appends, so truncating in place is safe."""
    config = cli.run("scontrol", ["show", "config"])
    path = next(
        (
            line.split("=", 1)[1].strip()
            for line in config.splitlines()
            if line.startswith("JobCompLoc")
        ),
        "",
    )
    if path and os.path.isfile(path) and os.access(path, os.W_OK):
        with open(path, "rb") as log, open(f"{path}.1", "ab") as old:
            old.write(log.read())
        with open(path, "r+b") as log:
            log.truncate(0)


def pct(values: list[float], p: float) -> float | None:
    """Nearest rank (docs/signals.md)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered) / 100) - 1)]


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def slurm_times(cli: Any, ids: list[int]) -> dict[int, tuple[float, float]]:
    """Start and end (epoch seconds) of finished Slurm jobs, from the completion log."""
    out: dict[int, tuple[float, float]] = {}
    for chunk in range(0, len(ids), 200):
        text = cli.run(
            "sacct",
            [
                "-c",
                "-n",
                "-P",
                "-o",
                "JobID,Start,End",
                "-j",
                ",".join(map(str, ids[chunk : chunk + 200])),
            ],
        )
        for line in text.splitlines():
            job, start, end = ([*line.split("|"), "", ""])[:3]
            if job.isdigit() and start[:1].isdigit() and end[:1].isdigit():
                out[int(job)] = (
                    datetime.fromisoformat(start).timestamp(),
                    datetime.fromisoformat(end).timestamp(),
                )
    return out


def gaps(times: list[tuple[float, float]], gpus: int = GPUS) -> list[float]:
    """Completion to next start on the GPU it freed: with single-GPU jobs the i-th start
    after the first wave reuses the GPU of the (i - gpus)-th end (first freed, first
    reused), so the gap is the time that GPU stood idle between two jobs."""
    starts = sorted(start for start, _ in times)
    ends = sorted(end for _, end in times)
    return [max(0.0, starts[i] - ends[i - gpus]) for i in range(gpus, len(starts))]


def wait_done(cli: Any, prefix: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = [
            j
            for j in cli.jobs()
            if str(j.get("name", "")).startswith(prefix)
            and j.get("job_state") in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
        ]
        if not live:
            return
        time.sleep(0.2)
    raise SystemExit(f"Slurm jobs {prefix}* not done within {timeout} s")


def slurm_alone(cli: Any, jobs: int) -> tuple[float, list[tuple[float, float]]]:
    prefix = f"alone-{uuid.uuid4().hex[:6]}-"
    ids = []
    began = time.time()
    for i in range(jobs):
        ids.append(
            cli.sbatch(
                "#!/bin/sh\nexec sleep 1\n",
                [
                    f"--job-name={prefix}{i}",
                    "--no-requeue",
                    "--ntasks=1",
                    "--gpus-per-task=1",
                    "--partition=gpu-a,gpu-b",
                    "--output=/dev/null",
                ],
                {},
            )
        )
    wait_done(cli, prefix, 3600)
    times = list(slurm_times(cli, ids).values())
    makespan = max(end for _, end in times) - began
    return makespan, times


def world(prefix: str, shares: list[tuple[str, int, str]]) -> tuple[Any, dict[str, Any]]:
    from django.contrib.auth import get_user_model

    from governance.models import (
        InstanceType,
        JobQueue,
        Membership,
        QueueCapacity,
        Share,
        ShareLimit,
        SlurmQueueConfig,
        SlurmTeamConfig,
        SlurmTypeConfig,
        Team,
    )
    from governance.models.capacity import Executor

    itype, _ = InstanceType.objects.get_or_create(name=TYPE, defaults={"accelerators": 1})
    queue = JobQueue.objects.create(name=f"bench-{prefix}", executor=Executor.SLURM)
    QueueCapacity.objects.create(queue=queue, instance_type=itype, count=GPUS)
    SlurmQueueConfig.objects.create(queue=queue, grace_seconds=0)
    SlurmTypeConfig.objects.create(
        queue=queue, instance_type=itype, partition="gpu-a,gpu-b", gpus_per_instance=1
    )
    users: dict[str, Any] = {}
    for i, (name, limit, policy) in enumerate(shares):
        team = Team.objects.create(name=f"{prefix}-{name}")
        # Each team's jobs run as a Unix user of its own (scripts/slurm/start creates them).
        SlurmTeamConfig.objects.create(queue=queue, team=team, unix_user=TEAM_USERS[i % 2])
        share = Share.objects.create(
            queue=queue, team=team, name=name, policy=policy, borrow_limit=-1
        )
        ShareLimit.objects.create(share=share, instance_type=itype, count=limit)
        user = get_user_model().objects.create(username=f"{prefix}-{name}")
        Membership.objects.create(team=team, user=user, role="member")
        users[name] = (share, user)
    return queue, users


TEAM_USERS = ("gov-team-a", "gov-team-b")
POLL = 0.5  # seconds from one pass's start to the next (--poll)


def pass_every(queue_id: int, cli: Any, since: float) -> float:
    """One executor pass, started ``POLL`` seconds after the last one began (``since``),
    as beat's slurm-sync entry starts them; the time it began."""
    from scheduler.cycle.run import run_cycle
    from scheduler.executors.slurm import pass_

    time.sleep(max(0.0, since + POLL - time.monotonic()))
    began = time.monotonic()
    pass_.sync_queue(queue_id, cli=cli, cycle=run_cycle)
    return began


def drive(queue_id: int, cli: Any, done: Any, timeout: float) -> int:
    passes = 0
    deadline = time.monotonic() + timeout
    last = -POLL
    while not done():
        last = pass_every(queue_id, cli, last)
        passes += 1
        if time.monotonic() > deadline:
            raise SystemExit(f"the product run did not finish within {timeout} s")
    return passes


def product_a(cli: Any, jobs: int) -> tuple[float, list[tuple[float, float]], int]:
    from django.db import connection

    from governance.models import Job, JobState, SlurmRun
    from governance.services import jobs as job_services

    prefix = f"pa{uuid.uuid4().hex[:6]}"
    queue, users = world(prefix, [("a", GPUS, "LEND_AND_BORROW")])
    share, user = users["a"]

    def submit_all() -> None:
        try:
            for i in range(jobs):
                job_services.job_submit(
                    actor=user,
                    share=share,
                    name=f"a{i}",
                    preferences=[{"instance_type": TYPE, "count": 1}],
                    program={"command": ["sleep", "1"]},
                )
        finally:
            connection.close()

    # Users submit while the executor runs, as Slurm alone's sbatch calls overlap its
    # scheduling: the first jobs start while later ones are still being submitted.
    began = time.time()
    client = threading.Thread(target=submit_all)
    client.start()
    active = Job.objects.filter(queue=queue, state__in=(JobState.PENDING, JobState.RUNNING))
    passes = drive(queue.pk, cli, lambda: not client.is_alive() and not active.exists(), 3600)
    client.join()
    ids = list(SlurmRun.objects.filter(job__queue=queue).values_list("slurm_job_id", flat=True))
    times = list(slurm_times(cli, [i for i in ids if i]).values())
    makespan = max(end for _, end in times) - began
    return makespan, times, passes


def product_b(cli: Any, jobs: int, seed: int) -> dict[str, float | None]:
    """Team A (LEND_AND_BORROW) submits half the jobs at once (1 to 8 GPUs) and borrows
    whatever is idle; B, C and D (LEND) each keep one job of 1 to 4 GPUs submitted at a
    time, the next as soon as the last ends, so every owner submission finds its share's
    entitlement lent to A and takes it back."""
    from governance.models import Job, JobEvent, JobState, SlurmRun
    from governance.services import jobs as job_services

    rng = random.Random(seed)
    prefix = f"pb{uuid.uuid4().hex[:6]}"
    policies = [("A", 4, "LEND_AND_BORROW"), ("B", 4, "LEND"), ("C", 4, "LEND"), ("D", 4, "LEND")]
    queue, users = world(prefix, policies)
    submitted_at: dict[int, float] = {}

    def send(team: str, count: int) -> Job:
        share, user = users[team]
        job = job_services.job_submit(
            actor=user,
            share=share,
            name=team,
            preferences=[{"instance_type": TYPE, "count": count}],
            program={"command": ["sleep", "1"]},
        )
        submitted_at[job.pk] = job.submitted_at.timestamp()
        return job

    began = time.time()
    for _ in range(jobs // 2):
        send("A", rng.randint(1, 8))
    owners_left = jobs - jobs // 2
    current: dict[str, Job | None] = {"B": None, "C": None, "D": None}
    # Let A take every GPU first.
    drive(queue.pk, cli, lambda: SlurmRun.objects.filter(job__queue=queue).count() > 2, 120)
    pending = Job.objects.filter(queue=queue, state=JobState.PENDING)
    active = Job.objects.filter(queue=queue, state__in=(JobState.PENDING, JobState.RUNNING))
    placed_at = None
    deadline = time.monotonic() + 3600
    last = -POLL
    while owners_left or active.exists():
        for team, job in current.items():
            if owners_left and (
                job is None or job.state not in (JobState.PENDING, JobState.RUNNING)
            ):
                current[team] = send(team, rng.randint(1, 4))
                owners_left -= 1
        last = pass_every(queue.pk, cli, last)
        for job in current.values():
            if job is not None:
                job.refresh_from_db(fields=["state"])
        if placed_at is None and not owners_left and not pending.exists():
            placed_at = time.time()
        if time.monotonic() > deadline:
            raise SystemExit("the product run of (b) did not finish within an hour")
    reclaimers = set(
        JobEvent.objects.filter(
            job__queue=queue, type="preempted", data__reason="reclaim"
        ).values_list("data__by", flat=True)
    )
    first_runs = {
        r.job_id: r.slurm_job_id
        for r in SlurmRun.objects.filter(job_id__in=reclaimers, run=1)
        if r.slurm_job_id
    }
    times = slurm_times(cli, list(first_runs.values()))
    latency = [times[sid][0] - submitted_at[jid] for jid, sid in first_runs.items() if sid in times]
    return {
        "placed": (placed_at or time.time()) - began,
        "reclaims": float(len(latency)),
        "p50": pct(latency, 50),
        "p95": pct(latency, 95),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a-jobs", type=int, default=480)
    parser.add_argument(
        "--a-repeat",
        type=int,
        default=1,
        help="runs of (a) one after the other (this machine's noise is several percent)",
    )
    parser.add_argument("--b-jobs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-hook", action="store_true", help="the product polls only (no completion hook)"
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=None,
        help="seconds between executor passes (default: SLURM_POLL_SECONDS, as beat runs them)",
    )
    parser.add_argument(
        "--busy",
        action="store_true",
        help="run a second process that keeps one core busy throughout (target 1.25 x)",
    )
    args = parser.parse_args()
    global BUSY
    BUSY = args.busy
    _setup()
    from django.conf import settings

    from scheduler.executors.slurm.read import cli_from_settings

    global POLL
    POLL = settings.SLURM_POLL_SECONDS if args.poll is None else max(0.0, args.poll)
    # One job name prefix for the run (Slurm remembers earlier runs' jobs for a while),
    # shared with the web server's passes.
    settings.SLURM_JOB_PREFIX = f"b{uuid.uuid4().hex[:8]}"

    cli = cli_from_settings()
    rotate_completion_log(cli)
    hook = None if args.no_hook else Hook()
    how = "polling only" if args.no_hook else "the completion hook and polling"
    print(f"the product: an executor pass every {POLL:g} s, {how}")
    if args.busy:
        print("a second process keeps one core busy throughout")
    try:
        run(args, cli, hook)
    finally:
        if hook is not None:
            hook.close()


def side_by_side(cli: Any, hook: Hook | None, jobs: int) -> float:
    """One run of (a) and (c): Slurm alone, then the product; the makespan ratio."""
    if hook is not None:
        hook.off()
    alone, alone_times = slurm_alone(cli, jobs)
    per_start = alone * GPUS / jobs - 1
    print(f"    Slurm alone:  makespan {alone:.1f} s, overhead per job start {per_start:.3f} s")
    if hook is not None:
        hook.on()
    product, product_times, passes = product_a(cli, jobs)
    per_start_p = product * GPUS / jobs - 1
    print(
        f"    the product:  makespan {product:.1f} s, overhead per job start "
        f"{per_start_p:.3f} s ({passes} executor passes); ratio {product / alone:.2f} "
        f"(target <= {_target()})"
    )
    print("(c) completion to next start (Slurm's end and start times, 1 s resolution)")
    for label, times in (("Slurm alone", alone_times), ("the product", product_times)):
        g = gaps(times)
        print(f"    {label}: p50 {fmt(pct(g, 50))} s, p95 {fmt(pct(g, 95))} s (target p95 <= 1)")
    return product / alone


BUSY = False


def _target() -> str:
    """The ratio (a) aims at: 1.15 on a quiet machine, 1.25 beside a busy process."""
    return "1.25, beside a busy process" if BUSY else "1.15 on a quiet machine"


@contextlib.contextmanager
def busy_process(on: bool) -> Iterator[None]:
    """A second process keeping one core busy (a plain Python loop) while the runs go on,
    both sides alike: the machine as a shared host would have it."""
    if not on:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def run(args: argparse.Namespace, cli: Any, hook: Hook | None) -> None:
    with busy_process(args.busy):
        _run(args, cli, hook)


def _run(args: argparse.Namespace, cli: Any, hook: Hook | None) -> None:
    if args.a_jobs:
        print(f"(a) {args.a_jobs} one-second single-GPU jobs on {GPUS} GPUs")
        ratios = []
        for attempt in range(max(1, args.a_repeat)):
            if args.a_repeat > 1:
                print(f"  run {attempt + 1} of {args.a_repeat}")
            ratios.append(side_by_side(cli, hook, args.a_jobs))
        if len(ratios) > 1:
            print(
                f"    ratio over {len(ratios)} runs: median {statistics.median(ratios):.2f}, "
                f"min {min(ratios):.2f}, max {max(ratios):.2f} (target <= {_target()})"
            )
    if args.b_jobs:
        if hook is not None:
            hook.on()
        print(f"(b) {args.b_jobs} jobs of 1 to 8 GPUs, four shares of 4 GPUs, A borrowing")
        b = product_b(cli, args.b_jobs, args.seed)
        print(
            f"    all placed after {b['placed']:.1f} s; {b['reclaims']:.0f} reclaiming jobs, "
            f"submission to Slurm start p50 {fmt(b['p50'])} s, p95 {fmt(b['p95'])} s "
            "(target p95 <= 3)"
        )


if __name__ == "__main__":
    main()
