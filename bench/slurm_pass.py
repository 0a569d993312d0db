"""What one completion hook's pass costs the product itself, without Slurm's share.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything .venv/bin/python bench/slurm_pass.py \\
        [--pending 480] [--ends 8] [--waves 40]

``bench/slurm.py`` measures the product on a real Slurm, where one run moves by several
percent from the next on a small shared machine; this bench holds Slurm still to show
what the product's own part of a hook's pass costs and where a change moves it. A queue
of 16 single-GPU instances runs one share's jobs (``--pending`` of them waiting); each
wave ends ``--ends`` running jobs and calls ``pass_.hook_pass`` for them as their node
epilogs would (the first runs the pass, the others find their job reported). Slurm's
commands are answered by a stand-in at once (``sbatch`` gives the next job id, ``sacct -c``
the waves' ends), so every figure is the product's: database round trips of the pass,
this process's CPU time, the CPU time of its PostgreSQL backend (read from ``/proc``,
when the server runs on this machine), and wall time, each until the hook is answered
(the node it holds may go) and for the rest of the pass after it. Runs in a throwaway
database ``bench_slurm_pass_<name>``; prints medians over the waves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from throwaway import django_on_throwaway

TYPE = "ml.g5.bench"
GPUS = 16


def _setup() -> None:
    django_on_throwaway(
        "bench_slurm_pass",
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
        SLURM_OUTPUT_DIR="/tmp/bench-slurm-pass/out",
        SLURM_CHECKPOINT_DIR="/tmp/bench-slurm-pass/ckpt",
        SLURM_HOOK_GATHER_SECONDS="0",  # a wait, not a cost: left out whatever the setting
    )


def _stand_in() -> Any:
    from scheduler.executors.slurm.cli import Cli, Finished

    class StandIn(Cli):
        """Slurm's answers, given at once: the jobs it runs and the ones that ended."""

        def __init__(self) -> None:
            super().__init__(conf="", timeout=5)
            self.next_id = 1000
            self.running: list[int] = []
            self.ended: set[int] = set()

        def sbatch(
            self,
            script: str,
            options: Sequence[str],
            env: Any,
            *,
            uid: int | None = None,
            gid: int | None = None,
        ) -> int:
            self.next_id += 1
            self.running.append(self.next_id)
            return self.next_id

        def finished(self, job_ids: Sequence[int]) -> dict[int, Finished]:
            return {i: Finished("COMPLETED", 0, 0) for i in job_ids if i in self.ended}

        def jobs(self, partitions: Sequence[str] = ()) -> list[dict[str, Any]]:
            return [{"job_id": i, "name": "", "job_state": "RUNNING"} for i in self.running]

        def sinfo_nodes(self) -> list[dict[str, Any]]:
            return [
                {"name": f"n{i}", "partitions": ["gpu"], "gres": "gpu:4", "state": "IDLE"}
                for i in range(GPUS // 4)
            ]

        def end(self, count: int) -> list[int]:
            done, self.running = self.running[:count], self.running[count:]
            self.ended.update(done)
            return done

    return StandIn()


def _world(pending: int) -> int:
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
    from governance.services import jobs as job_services

    itype = InstanceType.objects.create(name=TYPE, accelerators=1)
    queue = JobQueue.objects.create(name="bench-pass", executor=Executor.SLURM)
    QueueCapacity.objects.create(queue=queue, instance_type=itype, count=GPUS)
    SlurmQueueConfig.objects.create(queue=queue, grace_seconds=0)
    SlurmTypeConfig.objects.create(
        queue=queue, instance_type=itype, partition="gpu", gpus_per_instance=1
    )
    team = Team.objects.create(name="bench")
    # Its jobs run as a team user of scripts/slurm/start (the stand-in runs nothing).
    SlurmTeamConfig.objects.create(queue=queue, team=team, unix_user="gov-team-a")
    share = Share.objects.create(
        queue=queue, team=team, name="a", policy="LEND_AND_BORROW", borrow_limit=-1
    )
    ShareLimit.objects.create(share=share, instance_type=itype, count=GPUS)
    user = get_user_model().objects.create(username="bench")
    Membership.objects.create(team=team, user=user, role="member")
    for i in range(pending + GPUS):
        job_services.job_submit(
            actor=user,
            share=share,
            name=f"j{i}",
            preferences=[{"instance_type": TYPE, "count": 1}],
            program={"command": ["sleep", "1"]},
        )
    return queue.pk


class Meter:
    """Round trips, this process's CPU, its PostgreSQL backend's CPU and wall time of a
    stretch of work."""

    def __init__(self) -> None:
        from django.db import connection

        self.trips = 0
        connection.ensure_connection()
        connection.execute_wrappers.append(self._count)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        self.stat = Path(f"/proc/{pid}/stat")
        self.tick = os.sysconf("SC_CLK_TCK")

    def _count(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any
    ) -> Any:
        self.trips += 1
        return execute(sql, params, many, ctx)

    def backend_cpu(self) -> float | None:
        try:
            fields = self.stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the server runs elsewhere
            return None
        return (int(fields[11]) + int(fields[12])) / self.tick

    def measure(
        self, work: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> tuple[int, float, float, float | None]:
        trips, backend = self.trips, self.backend_cpu()
        cpu, wall = time.process_time(), time.perf_counter()
        work(*args, **kwargs)
        after = self.backend_cpu()
        return (
            self.trips - trips,
            (time.process_time() - cpu) * 1000,
            (time.perf_counter() - wall) * 1000,
            (after - backend) * 1000 if after is not None and backend is not None else None,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pending", type=int, default=480, help="jobs waiting in the queue")
    parser.add_argument("--ends", type=int, default=8, help="jobs ending in each wave")
    parser.add_argument("--waves", type=int, default=40)
    args = parser.parse_args()
    ends = max(1, min(args.ends, GPUS))
    _setup()
    from scheduler.cycle.run import run_cycle
    from scheduler.executors.slurm import pass_

    queue_id = _world(args.pending + args.waves * ends)
    slurm = _stand_in()
    pass_.sync_queue(queue_id, cli=slurm, cycle=run_cycle)  # the first GPUS jobs start
    meter = Meter()
    until_answer: list[tuple[int, float, float, float | None]] = []
    after_answer: list[tuple[int, float, float, float | None]] = []
    others: list[tuple[int, float, float, float | None]] = []
    for _ in range(args.waves):
        ended = slurm.end(ends)
        rest: list[Callable[[], None]] = []
        until_answer.append(
            meter.measure(
                pass_.hook_pass, queue_id, ended[0], cli=slurm, defer=rest.append, cycle=run_cycle
            )
        )
        after_answer.append(meter.measure(lambda steps: [step() for step in steps], rest))
        for job in ended[1:]:
            others.append(meter.measure(pass_.hook_pass, queue_id, job, cli=slurm, cycle=run_cycle))

    def line(label: str, rows: list[tuple[int, float, float, float | None]]) -> str:
        trips, cpu, wall, backend = zip(*rows, strict=True)
        pg = [b for b in backend if b is not None]
        pg_text = f", PostgreSQL {statistics.median(pg):5.1f} ms CPU" if pg else ""
        return (
            f"  {label}: {statistics.median(trips):.0f} round trips, "
            f"{statistics.median(cpu):5.1f} ms CPU{pg_text}, {statistics.median(wall):5.1f} ms"
        )

    print(
        f"one hook's pass: {ends} ends and {ends} admissions, {args.pending} to "
        f"{args.pending + args.waves * ends} jobs waiting, {args.waves} waves "
        "(Slurm answered at once by a stand-in; medians)"
    )
    print(line("until the hook is answered", until_answer))
    print(line("the rest of the pass      ", after_answer))
    if others:
        print(line("a hook whose job it reported", others))


if __name__ == "__main__":
    main()
