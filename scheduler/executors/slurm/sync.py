"""One pass of the slurm executor over one queue (``sync_queue``).

A pass reads Slurm (``squeue`` for every user's jobs, ``sacct -c`` for jobs gone from
squeue, ``sinfo --json`` for nodes), then, in this order within an instant:

1. reports what each Slurm job did through the run services (completed, failed with its
   exit code or signal, node failure as ``capacity_lost``, unknown to Slurm as lost) and
   confirms the end of runs the product stopped;
2. the drift guard (``_drift``, regular passes): jobs on the queue's partitions beyond
   what the product admitted are recorded, and the GPUs they hold set aside;
3. sets each type's capacity from the usable nodes (read again when a run's node failed)
   less those GPUs, so a node going down reaches the engine as lost capacity before
   anything is admitted, and a node coming back as new capacity;
4. runs the queue's scheduling cycle (``scheduler.bridge.run_cycle``): 1 to 4 and the rows
   of the runs to submit are the cycle's one transaction;
5. cancels what the drift guard found (unless the queue only reports), stops runs the
   product preempted or cancelled (a signal first, a cancel after the grace period) and
   submits each new admission as its team's Unix user (one ``sbatch`` per run, its row
   written with the admission so a lost answer is found again by the job's name, never
   submitted twice); then records sbatch's answers, and the starts it saw.

If Slurm cannot be reached the pass changes nothing and the executor pauses (the pages
say since when); passes retry with backoff until Slurm answers. Passes of one queue never
overlap (a PostgreSQL advisory lock): a regular pass takes it once it has read Slurm, a
completion hook's pass (``hook_pass``) before, as the hooks of one wave wait on it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache, cached_property
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from governance.models import (
    DecisionRule,
    Job,
    JobQueue,
    JobState,
    QueueCapacity,
    SlurmQueueConfig,
    SlurmRun,
    SlurmRunState,
    SlurmTeamConfig,
    SlurmTypeConfig,
)
from governance.models.capacity import Executor
from governance.services import runs
from governance.services import slurm as slurm_services
from governance.services.errors import ServiceError
from governance.services.kit import job_event
from scheduler import bridge
from scheduler.engine import Decision
from scheduler.executors.slurm import identity, output, submit
from scheduler.executors.slurm.cli import (
    TERMINAL_STATES,
    Cli,
    Finished,
    SlurmError,
    SlurmUnreachable,
    exit_status,
    job_state,
    node_gpus,
    node_usable,
)

log = logging.getLogger(__name__)

LOCK_CLASS = 0x51A7  # advisory lock namespace of the slurm executor
NODES_CLASS = 0x51A8  # held by a pass until hooks whose jobs it reported may go (``_Releasing``)
MAX_BACKOFF_SECONDS = 30.0
MAX_SUBMIT_ATTEMPTS = 5
# Up to this many active runs the hook's pass asks the completion log about each of them
# instead of listing the queue (one sacct call: it takes 1,000 ids at once).
HOOK_SACCT_ONLY = 1000
SUBMIT_THREADS = 16  # sbatch calls at once (each waits on the controller)
RECANCEL_SECONDS = 5.0
LOCK_POLL_SECONDS = 0.02  # a regular pass waiting for a hook's pass tries again this often
# Slurm states in which a run has lost its machines rather than failed by itself.
LOST_MACHINES = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})
LIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED"})


@dataclass
class SyncResult:
    queue_id: int
    paused: bool = False
    skipped: str = ""
    submitted: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    stopped: int = 0
    capacity: dict[str, int] | None = None
    nodes_lost: bool = False  # a run ended as its node failed: capacity is read again
    drift: list[int] = field(default_factory=list)
    """Slurm jobs the drift guard found beyond what the product admitted."""
    drift_cancels: list[int] = field(default_factory=list)  # of those, the ones it cancels
    cycle: bridge.CycleResult | None = None
    errors: list[str] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    """Slurm jobs whose end the pass recorded (a hook's answer lists them: the epilogs of
    their nodes need not call)."""


def cli_from_settings() -> Cli:
    return Cli(
        conf=settings.SLURM_CONF,
        timeout=settings.SLURM_COMMAND_TIMEOUT,
        bin_dir=settings.SLURM_BIN_DIR,
    )


@cache
def _threads() -> ThreadPoolExecutor:
    """The Slurm commands a pass runs at once (its reads, its sbatch calls), on threads
    kept from pass to pass: starting 16 threads per pass cost more than the calls'
    bookkeeping. Made on first use, so in the process that runs passes (never in a parent
    that forks its workers later)."""
    return ThreadPoolExecutor(max_workers=SUBMIT_THREADS, thread_name_prefix="slurm")


def backoff(failures: int) -> float:
    """Seconds before the next attempt after ``failures`` failures in a row."""
    return float(min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** max(0, failures - 1)))


@contextmanager
def queue_lock(queue_id: int, *, wait: float = 0.0) -> Iterator[bool]:
    """One pass per queue at a time, across workers (a session-level advisory lock, tried
    for up to ``wait`` seconds: a pass that finds it taken longer is skipped)."""
    deadline = time.monotonic() + wait
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_CLASS, queue_id])
            got = bool(cursor.fetchone()[0])
            if got or time.monotonic() >= deadline:
                break
            time.sleep(LOCK_POLL_SECONDS)
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, queue_id])


def _unreported(queue_id: int, slurm_job_id: int) -> bool:
    """Whether a run of ``queue_id`` still waits for the end of Slurm job ``slurm_job_id``."""
    return (
        SlurmRun.objects.filter(slurm_job_id=slurm_job_id, job__queue_id=queue_id)
        .exclude(state=SlurmRunState.ENDED)
        .exists()
    )


def _ended_with(queue_id: int, slurm_job_id: int) -> list[int]:
    """The Slurm jobs whose end the pass that recorded ``slurm_job_id``'s recorded too (a
    pass gives every end it records one time)."""
    runs_of_queue = SlurmRun.objects.filter(job__queue_id=queue_id, slurm_job_id__isnull=False)
    ended_at = (
        runs_of_queue.filter(slurm_job_id=slurm_job_id, state=SlurmRunState.ENDED)
        .order_by("-id")
        .values_list("ended_at", flat=True)
        .first()
    )
    if ended_at is None:
        return []
    ids = runs_of_queue.filter(ended_at=ended_at).values_list("slurm_job_id", flat=True)
    return sorted(sid for sid in ids if sid is not None)


def _wait_for(lock_class: int, queue_id: int, wait: float) -> bool:
    """Wait up to ``wait`` seconds while a pass of ``queue_id`` holds its lock of
    ``lock_class`` (``LOCK_CLASS`` for its whole run, ``NODES_CLASS`` until the hooks
    whose jobs it reported may release their nodes); False when it held it longer. A
    shared lock taken and let go at once: every hook waiting on the same pass is let go
    together (an exclusive wait would let them go one by one)."""
    if wait <= 0:
        return False
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, true)", [f"{max(1, int(wait * 1000))}ms"]
            )
            cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", [lock_class, queue_id])
        return True
    except OperationalError:  # lock_timeout: the pass ran too long
        return False


class _Releasing:
    """Held by a running pass until the hooks whose jobs it reported may release their
    nodes (``hook_pass``): a hook's pass lets go once its reports are committed, a
    regular pass once its stops and submissions are sent. Taken after the queue's lock,
    so taking it never waits."""

    def __init__(self, queue_id: int) -> None:
        self.queue_id = queue_id
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [NODES_CLASS, queue_id])
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [NODES_CLASS, self.queue_id])


def sync_all(cli: Cli | None = None) -> list[SyncResult]:
    """A pass over every queue run by Slurm (beat's ``slurm-sync`` entry)."""
    ids = JobQueue.objects.filter(executor=Executor.SLURM).values_list("id", flat=True)
    return [sync_queue(queue_id, cli=cli) for queue_id in ids]


def hook_pass(
    queue_id: int,
    slurm_job_id: int,
    *,
    cli: Cli | None = None,
    defer: Callable[[Callable[[], None]], None] | None = None,
) -> dict[str, object]:
    """The pass the completion hook asks for (``services.slurm.slurm_job_ended``).

    The jobs of one wave end together; the first hook runs the pass, which reports them
    all and holds that hook's node until it has submitted what runs next. One node is
    enough: the controller schedules every pending job when any epilog ends. So a hook
    whose job a pass reported returns as soon as its node may go (``_Releasing``): at
    once for a hook's pass, which holds its own node past its submissions, and once its
    submissions are sent for a regular pass, which holds none. A hook whose job the
    running pass did not report (it ended after that pass read Slurm) waits for the pass
    to end and runs one itself.

    Returns what the pass did once its node may go. What is left of the pass then
    (recording sbatch's answers and the usage history, letting go of the queue) is handed
    to ``defer`` when given, for the caller to run once it has answered the epilog (the
    hook's view: the node goes while the pass ends); else it runs before this returns."""
    result = SyncResult(queue_id=queue_id)
    steps = _hook_steps(queue_id, slurm_job_id, cli, result)
    next(steps, None)  # up to the moment the node may go
    summary: dict[str, object] = {
        "skipped": result.skipped,
        "paused": result.paused,
        "completed": result.completed,
        "failed": result.failed,
        "lost": result.lost,
        "stopped": result.stopped,
        "started": result.started,
        "submitted": result.submitted,
        "reported": result.ended,
    }
    if defer is None:
        _finish(steps)
    else:
        defer(lambda: _finish(steps))
    return summary


def _finish(steps: Iterator[None]) -> None:
    for _ in steps:
        pass


def _hook_steps(
    queue_id: int, slurm_job_id: int, cli: Cli | None, result: SyncResult
) -> Iterator[None]:
    """``hook_pass``'s steps: they pause once the hook's node may go."""
    deadline = time.monotonic() + settings.SLURM_HOOK_WAIT_SECONDS
    while True:
        with queue_lock(queue_id) as got:
            if got:
                if _unreported(queue_id, slurm_job_id):
                    yield from _pass(queue_id, cli or cli_from_settings(), result)
                else:  # the pass that reported it has ended
                    result.skipped = "an earlier pass reported the job's end"
                    result.ended = _ended_with(queue_id, slurm_job_id)
                return
        if not _wait_for(NODES_CLASS, queue_id, deadline - time.monotonic()):
            result.skipped = "another pass of this queue ran too long"
            return
        if not _unreported(queue_id, slurm_job_id):
            result.skipped = "a pass reported the job's end and released its node"
            result.ended = _ended_with(queue_id, slurm_job_id)
            return
        if not _wait_for(LOCK_CLASS, queue_id, deadline - time.monotonic()):
            result.skipped = "another pass of this queue ran too long"
            return


def sync_queue(queue_id: int, *, cli: Cli | None = None) -> SyncResult:
    """One pass over one queue (see the module's docstring).

    It reads Slurm before it takes the queue's lock and reports the starts and
    checkpoints it saw after it let go: a completion hook arriving meanwhile waits only
    for what passes must not do at once (reporting ends, the cycle, the submissions)."""
    cli = cli or cli_from_settings()
    result = SyncResult(queue_id=queue_id)
    seen = _read(queue_id, cli, result, settle=True)
    if seen is None:
        return result
    # A hook's pass that runs meanwhile is short: wait for it rather than skip the starts
    # and node changes this pass read (hooks of a busy queue would skip every one).
    with queue_lock(queue_id, wait=settings.SLURM_HOOK_WAIT_SECONDS) as got:
        if not got:
            result.skipped = "another pass of this queue is running"
            return result
        _still_open(seen)
        _finish(_pass(queue_id, cli, result, seen=seen))
    _settle(queue_id, result, seen.starts, seen.now)
    return result


def _still_open(seen: _Seen) -> None:
    """Once the queue is locked: keep, of what was read, the runs that are still open (a
    hook's pass may have reported some since), as they are now. A run submitted since is
    left to the next pass: Slurm was read before it existed."""
    read = {r.pk for r in seen.followed}
    seen.active = _open_runs(seen.config.queue_id)
    seen.followed = [r for r in seen.active if r.pk in read]
    for slurm_run in seen.followed:
        if slurm_run.slurm_job_id is None:  # a lost sbatch answer: found again by its name
            _find_again(slurm_run, seen.slurm)


@dataclass
class _Seen:
    """What the pass read before it changes anything, for the rest of the pass."""

    config: SlurmQueueConfig
    slurm: _SlurmJobs
    nodes: list[dict[str, Any]] | None
    now: datetime
    # Every run of the queue not ended when the pass began, as the reports leave them
    # (those reported over are ENDED then): the stop and submission steps work from these,
    # which no other pass changes while this one holds the queue's lock.
    active: list[SlurmRun]
    followed: list[SlurmRun]  # the runs whose news the pass reports
    by_id: dict[int, dict[str, Any]]
    finished: dict[int, Finished]
    starts: list[SlurmRun] = field(default_factory=list)  # reported by a regular pass's end


def _pass(
    queue_id: int, cli: Cli, result: SyncResult, *, seen: _Seen | None = None
) -> Iterator[None]:
    """The pass, in steps, under the queue's lock: it pauses once Slurm has what runs next
    (the node a hook's pass holds may go), before it records what sbatch answered and the
    usage history. Without ``seen`` (the completion hook's pass, which holds a node) it
    reads Slurm itself, only the completion log: node changes, start reports and
    checkpoints are for the next regular pass.

    One transaction, the cycle's, holds everything the pass decides: the reports of what
    Slurm said, the capacity it gives, the cycle's decisions and the rows of the runs to
    submit (``_Plan.write``), from the queue as the cycle reads it; nothing is read twice.
    Slurm is told (stops, then submissions) once it has committed."""
    releasing = _Releasing(queue_id)
    submitted: list[SlurmRun] = []
    hook = seen is None
    try:
        if seen is None:  # hooks that call meanwhile find their job's end in what it reads
            if settings.SLURM_HOOK_GATHER_SECONDS > 0:
                time.sleep(settings.SLURM_HOOK_GATHER_SECONDS)
            seen = _read(queue_id, cli, result, settle=False)
        if seen is None:
            return

        def report() -> None:
            _report(seen, result)
            nodes = seen.nodes
            mappings = None
            held: dict[str, int] = {}
            if seen.slurm.read and not hook:
                mappings = _mappings(queue_id)  # read once for the guard and the capacity
                held = _drift(queue_id, seen, result, mappings)
            if result.nodes_lost:
                # A node failed under a run: capacity as Slurm has it now, before the
                # cycle admits anything (the nodes read with the queue may predate it).
                try:
                    nodes = cli.sinfo_nodes()
                except SlurmError as exc:
                    result.errors.append(str(exc))
            if nodes is not None:
                result.capacity = _observe_capacity(queue_id, nodes, seen.now, held, mappings)

        plan = _Plan(queue_id, seen.config, seen.active)
        result.cycle = bridge.run_cycle(
            queue_id, before=report, within=plan.write, record_usage=False
        )
        if hook:  # the reports are in: only this hook's node waits for the submissions
            releasing.release()
        now = timezone.now()
        _cancel_drift(cli, result)
        _stop(queue_id, cli, seen.config, seen.slurm, now, result, plan.stops)
        submitted = _submit(cli, seen.slurm, now, result, plan)
    finally:
        releasing.release()
    yield  # Slurm has what runs next
    _submitted(submitted)
    assert result.cycle is not None
    bridge.record_usage(result.cycle)


class _Plan:
    """What the pass does to Slurm after its cycle, worked out in the cycle's transaction
    (``write``) from the queue as the cycle left it: the runs to stop (a run its job no
    longer runs, or one being stopped), the runs to submit, whose rows it writes there (a
    submission whose answer is lost is then found again by its name, never made twice),
    and the failed submissions to retry."""

    def __init__(self, queue_id: int, config: SlurmQueueConfig, active: list[SlurmRun]) -> None:
        self.queue_id = queue_id
        self.config = config
        self.active = active
        self.stops: list[SlurmRun] = []
        self.todo: list[tuple[Job, SlurmRun, submit.Submission | str]] = []
        self.retries: list[tuple[Job, SlurmRun]] = []
        self.mappings: dict[int, SlurmTypeConfig] = {}
        self.teams: dict[int, SlurmTeamConfig] = {}  # share id -> its team's Unix user
        self.speeds: dict[int, float] = {}  # instance type id -> speed

    def write(self, loaded: bridge.Loaded, decisions: list[Decision]) -> None:
        running = _running_runs(loaded, decisions)
        open_runs = [r for r in self.active if r.state != SlurmRunState.ENDED]
        self.stops = [
            r
            for r in open_runs
            if r.state == SlurmRunState.STOPPING or running.get(r.job_id) != r.run
        ]
        if not running:
            return
        # A run admitted by this cycle has no row yet; one with an open row has been
        # submitted. Any other running run (admitted by a cycle elsewhere) is looked up, in
        # every state: a run whose row ended is not submitted again.
        admitted = {int(d.job) for d in decisions if d.kind == "admitted"}
        known = {(r.job_id, r.run) for r in open_runs}
        unsure = [k for k, run in running.items() if (k, run) not in known and k not in admitted]
        if unsure:
            known |= set(SlurmRun.objects.filter(job_id__in=unsure).values_list("job_id", "run"))
        missing = [key for key, run in running.items() if (key, run) not in known]
        self.retries = [  # failed submissions (no Slurm job): the submission step retries
            (slurm_run.job, slurm_run)
            for slurm_run in open_runs
            if slurm_run.state == SlurmRunState.SUBMITTING
            and not slurm_run.slurm_job_id
            and running.get(slurm_run.job_id) == slurm_run.run
        ]
        if not missing and not self.retries:
            return
        self.mappings = {
            m.instance_type_id: m for m in SlurmTypeConfig.objects.filter(queue_id=self.queue_id)
        }
        self.teams = {  # one query: the teams' users by the queue's shares
            share_id: SlurmTeamConfig(unix_user=user, account=account, qos=qos)
            for share_id, user, account, qos in SlurmTeamConfig.objects.filter(
                queue_id=self.queue_id, team__shares__queue_id=self.queue_id
            ).values_list("team__shares__id", "unix_user", "account", "qos")
        }
        self.speeds = {
            loaded.type_ids[name]: float(spec.speed)
            for name, spec in loaded.engine.instance_types.items()
        }
        loaded.jobs.prefetch(str(key) for key in missing)
        new_runs: list[SlurmRun] = []
        for key in missing:
            job = loaded.jobs[str(key)]
            slurm_run = SlurmRun(
                job=job,
                run=job.run,
                name=submit.job_name(settings.SLURM_JOB_PREFIX, job.pk, job.run),
                created_at=loaded.now,
            )
            new_runs.append(slurm_run)
            self.todo.append((job, slurm_run, self.prepare(job, slurm_run)))
        # Written with the admissions: a submission whose answer is lost is found again.
        SlurmRun.objects.bulk_create(new_runs)

    def prepare(self, job: Job, slurm_run: SlurmRun) -> submit.Submission | str:
        type_id = job.instance_type_id
        mapping = self.mappings.get(type_id) if type_id else None
        return _prepare(
            job,
            slurm_run,
            mapping,
            self.teams.get(job.share_id),
            self.config,
            self.speeds.get(type_id or 0, 1.0),
        )


def _running_runs(loaded: bridge.Loaded, decisions: list[Decision]) -> dict[int, int]:
    """The queue's running jobs once the cycle's decisions are applied, in the order they
    started (then by id): job id -> its run."""
    touched = {d.job for d in decisions}
    running: list[tuple[Any, int, int]] = []
    for key, row in loaded.jobs.rows.items():
        if key in touched:
            job = loaded.jobs[key]  # as the decisions left it
            if job.state == JobState.RUNNING:
                running.append((job.run_started_at, job.pk, job.run))
        elif row["state"] == JobState.RUNNING:
            running.append((row["run_started_at"], row["id"], row["run"]))
    running.sort(key=lambda item: (item[0] is None, item[0] or loaded.now, item[1]))
    return {job_id: run for _, job_id, run in running}


def _submit(
    cli: Cli, slurm: _SlurmJobs, now: datetime, result: SyncResult, plan: _Plan
) -> list[SlurmRun]:
    """One sbatch per run the plan submits (its row written with the cycle) and per failed
    submission due again, several at once. Returns the runs Slurm took, their job ids set
    (``_submitted`` records them); failures are recorded here. A retry is first looked
    for in Slurm under its name: the sbatch that failed may have made the job and lost
    only its answer."""
    todo = list(plan.todo)
    retried: list[SlurmRun] = []
    for job, slurm_run in plan.retries:
        if slurm_run.retry_at is not None and now < slurm_run.retry_at:
            continue
        try:
            if _find_again(slurm_run, slurm):
                continue
        except SlurmError:
            continue  # not submitted blind: the next pass looks again
        sub = plan.prepare(job, slurm_run)
        todo.append((job, slurm_run, sub))
        if not isinstance(sub, str):
            retried.append(slurm_run)
    if not todo:
        return []
    # The attempt is counted before sbatch is called.
    SlurmRun.objects.bulk_update(retried, ["attempts", "stdout", "partition", "unix_user"])

    def call(item: tuple[Job, SlurmRun, submit.Submission | str]) -> int | SlurmError | None:
        sub = item[2]
        if isinstance(sub, str):
            return None
        try:
            return cli.sbatch(sub.script, sub.options, sub.env, uid=sub.uid, gid=sub.gid)
        except SlurmError as exc:
            return exc

    answers = list(_threads().map(call, todo))
    submitted: list[SlurmRun] = []
    for (job, slurm_run, sub), answer in zip(todo, answers, strict=True):
        if not isinstance(sub, str) and isinstance(answer, int):
            _adopt(slurm_run, answer, slurm_run.partition, save=False)
            submitted.append(slurm_run)
            result.submitted += 1
        else:
            _record(job, slurm_run, sub, answer, now, result)
    return submitted


def _submitted(slurm_runs: list[SlurmRun]) -> None:
    """Record the Slurm job ids sbatch answered, in one statement (``_adopt`` set them on
    the runs)."""
    if not slurm_runs:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {SlurmRun._meta.db_table} AS r"
            " SET slurm_job_id = a.slurm_job_id, stdout = a.stdout, stderr = a.stderr,"
            " state = %s, retry_at = NULL"
            " FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[])"
            " AS a(id, slurm_job_id, stdout, stderr) WHERE r.id = a.id",
            [
                SlurmRunState.SUBMITTED,
                [r.pk for r in slurm_runs],
                [r.slurm_job_id for r in slurm_runs],
                [r.stdout for r in slurm_runs],
                [r.stderr for r in slurm_runs],
            ],
        )


def _settle(queue_id: int, result: SyncResult, starts: list[SlurmRun], now: datetime) -> None:
    """A regular pass's last part, once it let go of the queue: start reports and
    checkpoints (a hook's pass leaves them to the next regular pass)."""
    if starts:
        # A run preempted or ended meanwhile (by a hook's pass) is left out.
        with transaction.atomic():
            by_state: dict[str, list[int]] = {}
            for slurm_run in starts:
                slurm_run.started_seen = True
                by_state.setdefault(slurm_run.slurm_state, []).append(slurm_run.pk)
            for slurm_state, pks in by_state.items():
                SlurmRun.objects.filter(pk__in=pks).exclude(state=SlurmRunState.ENDED).update(
                    started_seen=True, slurm_state=slurm_state
                )
            reported = runs.runs_started(started=[(r.job_id, r.run) for r in starts], now=now)
            result.started += len(reported)
    _checkpoints(queue_id, now)


def _open_runs(queue_id: int) -> list[SlurmRun]:
    """The queue's runs not ended, with their jobs."""
    return list(
        SlurmRun.objects.filter(job__queue_id=queue_id)
        .exclude(state=SlurmRunState.ENDED)
        .select_related("job")
        .order_by("id")
    )


def _read(queue_id: int, cli: Cli, result: SyncResult, *, settle: bool) -> _Seen | None:
    """The pass's first part: what Slurm says of the queue's runs (and of the nodes, for a
    regular pass). None when Slurm could not be read (the executor pauses) or the executor
    backs off."""
    config, _ = SlurmQueueConfig.objects.get_or_create(queue_id=queue_id)
    now = timezone.now()
    if config.retry_at is not None and now < config.retry_at:
        result.paused = config.paused_since is not None
        result.skipped = "backing off after a failure"
        return None
    prefix = f"{settings.SLURM_JOB_PREFIX}-"
    active = _open_runs(queue_id)
    slurm = _SlurmJobs(cli, prefix)
    try:
        if settle or len(active) > HOOK_SACCT_ONLY:
            # Two independent reads at once (the hook's pass leaves the nodes to the next
            # pass: a node's change waits half a second, the node the hook holds does not).
            nodes_call = _threads().submit(cli.sinfo_nodes) if settle else None
            listed = slurm.by_id
            nodes = nodes_call.result() if nodes_call is not None else None
            # The completion log has the final state of jobs gone from squeue, and of jobs
            # COMPLETING (their epilog runs, which is when the completion hook calls). It
            # is read only then: reading it costs more as it grows.
            ended = [
                r.slurm_job_id
                for r in active
                if r.slurm_job_id
                and (
                    r.slurm_job_id not in listed
                    or job_state(listed[r.slurm_job_id]) == "COMPLETING"
                )
            ]
        else:
            # The hook's pass holds a node: it reads only the completion log, for every
            # active run (one sacct, no call to the controller, which is busiest when a
            # wave of jobs ends); squeue only if it has a run to stop or to find again.
            nodes = None
            ended = [r.slurm_job_id for r in active if r.slurm_job_id]
        finished = cli.finished(ended)
    except SlurmError as exc:
        result.paused = True
        slurm_services.executor_pause(
            queue_id=queue_id, now=now, message=str(exc), retry_in=backoff(config.failures + 1)
        )
        return None
    if config.paused_since is not None or config.failures:
        slurm_services.executor_resume(queue_id=queue_id, now=now)
    followed = active
    if not slurm.read:  # the hook's pass follows only the runs the completion log has news of
        followed = [r for r in active if r.slurm_job_id in finished]
    by_id = slurm.by_id if slurm.read else {}
    return _Seen(config, slurm, nodes, now, active, followed, by_id, finished)


def _report(seen: _Seen, result: SyncResult) -> None:
    """Report what each followed run's job did, in the cycle's transaction, before the
    cycle reads the queue: ends first; the starts a regular pass saw are reported at its
    end, once what the ends freed is submitted. A wave of clean completions is reported
    together (one statement per kind of write)."""
    now = seen.now
    completions: list[SlurmRun] = []
    for slurm_run in seen.followed:
        try:  # the run services are atomic: a refusal leaves the pass's transaction usable
            _follow(slurm_run, seen.by_id, seen.finished, now, result, seen.starts, completions)
        except ServiceError as exc:  # a report the run services refuse (an old run)
            log.info("report for %s refused: %s", slurm_run.name, exc)
        if slurm_run.state == SlurmRunState.ENDED and slurm_run.slurm_job_id:
            result.ended.append(slurm_run.slurm_job_id)
    if completions:
        SlurmRun.objects.filter(pk__in=[r.pk for r in completions]).update(
            state=SlurmRunState.ENDED, slurm_state="COMPLETED", exit_code=0, ended_at=now
        )
        done = runs.runs_complete(done=[(r.job_id, r.run) for r in completions], now=now)
        result.completed += len(done)
        output.report_verdicts(done, completions, now)


ADOPTED_FIELDS = ["slurm_job_id", "state", "stdout", "stderr", "partition", "retry_at"]


class _SlurmJobs:
    """The product's jobs as squeue lists them, read once per pass when first needed: the
    hook's pass usually needs no listing at all."""

    def __init__(self, cli: Cli, prefix: str) -> None:
        self._cli = cli
        self._prefix = prefix
        self.read = False

    @cached_property
    def _jobs(self) -> list[dict[str, Any]]:
        jobs = self._cli.jobs()
        self.read = True
        return jobs

    @cached_property
    def by_id(self) -> dict[int, dict[str, Any]]:
        return {int(j["job_id"]): j for j in self._jobs if "job_id" in j}

    @cached_property
    def by_name(self) -> dict[str, dict[str, Any]]:
        return {
            str(j.get("name")): j
            for j in self._jobs
            if str(j.get("name", "")).startswith(self._prefix)
        }


def _find_again(slurm_run: SlurmRun, slurm: _SlurmJobs) -> bool:
    """Adopt the Slurm job an earlier sbatch made under the run's name, whose answer was
    lost; False when Slurm lists none."""
    found = slurm.by_name.get(slurm_run.name)
    if found is None or (slurm_run.unix_user and found.get("user") != slurm_run.unix_user):
        return False  # none, or a job of another user under the run's name
    _adopt(slurm_run, int(found["job_id"]), str(found.get("partition", "")))
    return True


def _adopt(slurm_run: SlurmRun, slurm_job_id: int, partition: str, *, save: bool = True) -> None:
    slurm_run.slurm_job_id = slurm_job_id
    slurm_run.state = SlurmRunState.SUBMITTED
    slurm_run.stdout = slurm_run.stdout.replace("%j", str(slurm_job_id))
    slurm_run.stderr = slurm_run.stdout
    slurm_run.partition = partition or slurm_run.partition
    slurm_run.retry_at = None
    if save:
        slurm_run.save(update_fields=ADOPTED_FIELDS)


def _status(
    slurm_run: SlurmRun, by_id: dict[int, dict[str, Any]], finished: dict[int, Finished]
) -> tuple[str | None, int | None, int | None]:
    """(state, exit code, signal) of the run's Slurm job; state None when Slurm knows
    nothing of it. A job still COMPLETING (its epilog runs) has its final state in the
    completion log already: that state is the answer when it is there."""
    if slurm_run.slurm_job_id is None:
        return None, None, None
    live = by_id.get(slurm_run.slurm_job_id)
    if live is not None and (
        job_state(live) != "COMPLETING" or slurm_run.slurm_job_id not in finished
    ):
        code, sig = exit_status(live)
        return job_state(live), code, sig
    done = finished.get(slurm_run.slurm_job_id)
    if done is not None:
        return done.state, done.exit_code, done.signal
    return None, None, None


ENDED_FIELDS = ["state", "slurm_state", "exit_code", "signal", "ended_at"]


def _end(
    slurm_run: SlurmRun,
    state: str | None,
    code: int | None,
    now: datetime,
    *,
    save: bool = True,
    sig: int | None = None,
) -> None:
    slurm_run.state = SlurmRunState.ENDED
    slurm_run.slurm_state = state or "UNKNOWN"
    # A job a signal ended has no exit code of its own (sacct says "0:9"): its signal is.
    slurm_run.exit_code = None if sig else code
    slurm_run.signal = sig or None
    slurm_run.ended_at = now
    if save:
        slurm_run.save(update_fields=ENDED_FIELDS)


def _follow(
    slurm_run: SlurmRun,
    by_id: dict[int, dict[str, Any]],
    finished: dict[int, Finished],
    now: datetime,
    result: SyncResult,
    starts: list[SlurmRun],
    completions: list[SlurmRun],
) -> None:
    """Report what the run's Slurm job did since the last pass. A start is only noted in
    ``starts`` and a clean completion in ``completions``: the caller reports those (starts
    after the submissions, completions all at once); the rest is reported here."""
    if slurm_run.slurm_job_id is None:
        return  # not (yet) in Slurm: the submission step retries or gives it up
    job = slurm_run.job  # as read at the pass's start; the run services re-read and lock it
    current = job.state == JobState.RUNNING and job.run == slurm_run.run
    state, code, sig = _status(slurm_run, by_id, finished)
    sid = slurm_run.slurm_job_id
    if slurm_run.state == SlurmRunState.STOPPING or not current:
        if state is None or state in TERMINAL_STATES:
            _end(slurm_run, state, code, now)
            job_event(
                job,
                now,
                "stopped",
                f"Slurm confirmed the end of job {sid} (run {slurm_run.run}): "
                f"{state or 'no longer known'}.",
                run=slurm_run.run,
                slurm_job_id=sid,
            )
            result.stopped += 1
        return
    if state is None:
        _end(slurm_run, None, None, now)
        runs.run_declare_lost(
            job_id=job.pk,
            run=slurm_run.run,
            now=now,
            rule=DecisionRule.SLURM_LOST,
            explanation=(
                f"Slurm no longer knows job {sid} of run {slurm_run.run}, neither in its "
                "queue nor in its completion log: the run is lost and the job requeued."
            ),
        )
        result.lost += 1
        return
    if state in LIVE_STATES and not slurm_run.started_seen:
        slurm_run.slurm_state = state
        starts.append(slurm_run)
        return
    if state not in TERMINAL_STATES:
        if slurm_run.slurm_state != state:
            slurm_run.slurm_state = state
            slurm_run.save(update_fields=["slurm_state"])
        return
    if state == "COMPLETED" and code == 0 and not sig:
        _end(slurm_run, state, code, now, save=False)
        completions.append(slurm_run)  # the caller reports them all at once
        return
    _end(slurm_run, state, code, now, sig=sig)
    how = _how(code, sig)
    if state in LOST_MACHINES:
        result.nodes_lost = True
        runs.run_capacity_lost(
            job_id=job.pk,
            run=slurm_run.run,
            now=now,
            explanation=(
                f"Stopped: Slurm job {sid} ended {state} (its node failed or went down); "
                "the job is requeued from its last checkpoint."
            ),
        )
        result.lost += 1
    elif state == "CANCELLED":
        runs.run_fail(
            actor=None,
            job_id=job.pk,
            run=slurm_run.run,
            now=now,
            message=f"Slurm job {sid} was cancelled in Slurm, outside the product ({how}).",
        )
        result.failed += 1
    else:
        runs.run_fail(
            actor=None,
            job_id=job.pk,
            run=slurm_run.run,
            now=now,
            message=f"Slurm job {sid} ended {state} with {how}.",
        )
        result.failed += 1


# Slurm states of a job that holds, or waits for, resources of the governed partitions.
DRIFT_STATES = frozenset(
    {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "REQUEUED", "RESIZING"}
)
HOLDING_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING"})


def _mappings(queue_id: int) -> list[SlurmTypeConfig]:
    return list(SlurmTypeConfig.objects.filter(queue_id=queue_id).select_related("instance_type"))


def _drift(
    queue_id: int, seen: _Seen, result: SyncResult, mappings: list[SlurmTypeConfig]
) -> dict[str, int]:
    """The drift guard, in the cycle's transaction before the capacity it gives: compare
    what Slurm runs on the queue's partitions with what the product admitted. A job the
    product did not submit, or a product job whose allocation exceeds its admission (more
    GPUs or nodes than its instances, an array, exclusive nodes), is recorded once
    (``slurm_services.slurm_drift_found``: audited, shown, told to admins) and cancelled
    after the commit unless the queue only reports; a product run found so fails, as
    its job no longer runs as admitted. Returns the GPUs such jobs hold, by type name."""
    by_partition: dict[str, SlurmTypeConfig] = {}
    for mapping in mappings:
        for partition in mapping.partition.split(","):
            if partition:
                by_partition.setdefault(partition, mapping)
    live = [
        j
        for j in seen.slurm.by_id.values()
        if j.get("job_state") in DRIFT_STATES
        and set(str(j.get("partition", "")).split(",")) & set(by_partition)
    ]
    runs_by_id = {r.slurm_job_id: r for r in seen.active if r.slurm_job_id}
    unsure = [j["job_id"] for j in live if j["job_id"] not in runs_by_id]
    if unsure:  # the product's, ended or of another queue: not drift, unless exceeding
        for other in SlurmRun.objects.filter(slurm_job_id__in=unsure).select_related("job"):
            runs_by_id.setdefault(other.slurm_job_id or 0, other)
    lost_answers = {r.name: r for r in seen.active if r.slurm_job_id is None}
    by_type = {m.instance_type_id: m for m in mappings}
    held: dict[str, int] = {}
    found: list[tuple[dict[str, Any], SlurmRun | None, list[str], int]] = []
    for job in live:
        slurm_run = runs_by_id.get(job["job_id"])
        gpus = int(job.get("gpus") or 0)
        if slurm_run is None:
            waiting = lost_answers.get(str(job.get("name")))
            if waiting is not None and job.get("user") == waiting.unix_user:
                continue  # a submission whose answer was lost: found again by its name
            kinds, excess = ["unknown"], gpus
        else:
            if slurm_run.state in (SlurmRunState.ENDED, SlurmRunState.STOPPING):
                continue  # being stopped, or its end confirmed: it goes
            if slurm_run.job.queue_id != queue_id:
                continue  # another queue's, on a partition both map: its own pass looks
            kinds, excess = _beyond(slurm_run, job, by_type)
        if not kinds:
            continue
        found.append((job, slurm_run, kinds, excess))
        if job.get("job_state") in HOLDING_STATES and excess:
            mapping = by_partition[str(job["partition"]).split(",")[0]]
            held[mapping.instance_type.name] = held.get(mapping.instance_type.name, 0) + excess
    report_only = seen.config.drift_report_only
    for job, slurm_run, kinds, _ in found:
        result.drift.append(job["job_id"])
        if not report_only:
            result.drift_cancels.append(job["job_id"])
        if slurm_run is not None and not report_only:
            _end_beyond(slurm_run, job, kinds, seen.now, result)
    slurm_services.slurm_drift_found(
        queue_id=queue_id,
        found=[(job, slurm_run, kinds) for job, slurm_run, kinds, _ in found],
        report_only=report_only,
        now=seen.now,
    )
    return held


def _beyond(
    slurm_run: SlurmRun, job: dict[str, Any], by_type: dict[int, SlurmTypeConfig]
) -> tuple[list[str], int]:
    """What a product job's Slurm allocation holds beyond its admission, and the GPUs
    beyond it."""
    product_job = slurm_run.job
    count = int(product_job.preferences[product_job.preference or 0]["count"])
    mapping = by_type.get(product_job.instance_type_id or 0)
    per = mapping.gpus_per_instance if mapping is not None else 0
    gpus = int(job.get("gpus") or 0)
    kinds = []
    if gpus > count * per:
        kinds.append("gpus")
    if int(job.get("nodes") or 0) > count:
        kinds.append("nodes")
    if job.get("array"):
        kinds.append("array")
    if job.get("exclusive"):
        kinds.append("exclusive")
    return kinds, max(0, gpus - count * per) if kinds else 0


def _end_beyond(
    slurm_run: SlurmRun, job: dict[str, Any], kinds: list[str], now: datetime, result: SyncResult
) -> None:
    """A product run whose Slurm job exceeds its admission fails: the job was changed
    behind the product's back (the drift guard cancels it after the commit)."""
    sid = job["job_id"]
    try:
        runs.run_fail(
            actor=None,
            job_id=slurm_run.job_id,
            run=slurm_run.run,
            now=now,
            message=(
                f"Slurm job {sid} holds more than the product admitted "
                f"({', '.join(kinds)}): the drift guard cancelled it "
                "(docs/slurm.md#security-model)."
            ),
        )
    except ServiceError as exc:
        log.info("drift of %s: the run's end was refused: %s", slurm_run.name, exc)
        return
    _end(slurm_run, "CANCELLED", None, now)
    result.failed += 1


def _cancel_drift(cli: Cli, result: SyncResult) -> None:
    """Cancel the jobs the drift guard found, once what it found is committed."""
    for sid in result.drift_cancels:
        try:
            cli.cancel(sid)
        except SlurmError as exc:  # the next pass finds it again
            result.errors.append(str(exc))


def _how(code: int | None, sig: int | None) -> str:
    """How a Slurm job ended, in words: a signal, the wrapper's missing working directory,
    or an exit code."""
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "an unknown signal"
        return f"signal {sig} ({name})"
    if code == submit.WORKDIR_EXIT:
        return (
            f"exit code {code}: its working directory does not exist or cannot be entered "
            "on its node (the product's wrapper says so in the job's output)"
        )
    return f"exit code {code}" if code is not None else "no exit code"


def _observe_capacity(
    queue_id: int,
    nodes: list[dict[str, Any]],
    now: datetime,
    held: dict[str, int] | None = None,
    mappings: list[SlurmTypeConfig] | None = None,
) -> dict[str, int] | None:
    """Each mapped type's capacity from the usable nodes of its partition/feature, less
    the GPUs jobs beyond the product's admissions hold there (``held``, by type name:
    capacity the product cannot use, never booked twice)."""
    held = held or {}
    capacity: dict[str, int] = {}
    unusable: set[str] = set()
    for mapping in _mappings(queue_id) if mappings is None else mappings:
        count = 0
        for node in nodes:
            partitions = node.get("partitions") or []
            features = str(node.get("active_features") or node.get("features") or "").split(",")
            if mapping.partition and not set(mapping.partition.split(",")) & set(partitions):
                continue
            if mapping.feature and mapping.feature not in features:
                continue
            if not node_usable(node):
                unusable.add(f"{node.get('name')} ({str(node.get('state', '')).lower()})")
                continue
            if mapping.gpus_per_instance:
                count += node_gpus(node, mapping.gres_name) // mapping.gpus_per_instance
            else:
                count += 1
        taken = held.get(mapping.instance_type.name, 0)
        if taken and mapping.gpus_per_instance:
            count = max(0, count - math.ceil(taken / mapping.gpus_per_instance))
        capacity[mapping.instance_type.name] = count
    if not capacity:
        return None
    stored = dict(
        QueueCapacity.objects.filter(
            queue_id=queue_id, instance_type__name__in=list(capacity)
        ).values_list("instance_type__name", "count")
    )
    if stored == capacity:
        return None  # the usual pass: nothing to lock or write
    nodes_text = ", ".join(sorted(unusable)) if unusable else "none"
    held_text = ", ".join(f"{gpus} GPUs of {name}" for name, gpus in sorted(held.items()))
    return slurm_services.queue_capacity_observed(
        queue_id=queue_id,
        capacity=capacity,
        now=now,
        explanation=f"Capacity as Slurm reports it; unusable nodes: {nodes_text}"
        + (f"; held by jobs beyond the product's admissions: {held_text}." if held else "."),
    )


def _stop(
    queue_id: int,
    cli: Cli,
    config: SlurmQueueConfig,
    slurm: _SlurmJobs,
    now: datetime,
    result: SyncResult,
    stops: list[SlurmRun],
) -> None:
    """Signal, then cancel after the grace period, the Slurm job of every run in ``stops``
    (runs whose job no longer runs them, and runs being stopped)."""
    for slurm_run in stops:
        if slurm_run.state == SlurmRunState.STOPPING and (
            slurm_run.retry_at is not None and now < slurm_run.retry_at
        ):
            continue  # signalled: its grace period runs
        try:  # what the job does now decides between a signal and a cancel
            by_id = slurm.by_id
        except SlurmError as exc:  # the next pass stops it
            result.errors.append(str(exc))
            return
        if slurm_run.slurm_job_id is None and not _find_again(slurm_run, slurm):
            _end(slurm_run, "NEVER_SUBMITTED", None, now)
            continue
        sid = slurm_run.slurm_job_id
        assert sid is not None
        state = job_state(by_id[sid]) if sid in by_id else None
        if state in TERMINAL_STATES:
            continue  # the next pass confirms it
        try:
            if slurm_run.state != SlurmRunState.STOPPING:
                if state in LIVE_STATES and config.grace_seconds > 0:
                    cli.signal(sid, "TERM")
                    wait = float(config.grace_seconds)
                else:
                    cli.cancel(sid)
                    wait = RECANCEL_SECONDS
                slurm_run.state = SlurmRunState.STOPPING
                slurm_run.signalled_at = now
                slurm_run.retry_at = now + timedelta(seconds=wait)
                slurm_run.save(update_fields=["state", "signalled_at", "retry_at"])
            else:
                cli.cancel(sid)
                slurm_run.retry_at = now + timedelta(seconds=RECANCEL_SECONDS)
                slurm_run.save(update_fields=["retry_at"])
        except SlurmError as exc:
            result.errors.append(str(exc))
            slurm_services.executor_failed(
                queue_id=queue_id,
                now=now,
                message=f"stopping Slurm job {sid} of {slurm_run.name}: {exc}",
                retry_in=0,
            )


@cache
def _team_dirs_of(
    user: str, output_base: str, checkpoint_base: str
) -> tuple[identity.Identity, str, str]:
    ident = identity.resolve(user)
    output_dir = identity.owned_dir(identity.base_dir(output_base), ident.user, ident)
    team_ckpt = identity.owned_dir(identity.base_dir(checkpoint_base), ident.user, ident)
    return ident, output_dir, team_ckpt


def _team_dirs(user: str) -> tuple[identity.Identity, str, str]:
    """A team's Unix user and its output and checkpoint directories (made and put right on
    first use in this process, then kept: a pass submits many runs of a few teams). A
    directory gone meanwhile is made again."""
    key = (user, settings.SLURM_OUTPUT_DIR, settings.SLURM_CHECKPOINT_DIR)
    found = _team_dirs_of(*key)
    if not (os.path.isdir(found[1]) and os.path.isdir(found[2])):
        _team_dirs_of.cache_clear()
        found = _team_dirs_of(*key)
    return found


def _prepare(
    job: Job,
    slurm_run: SlurmRun,
    mapping: SlurmTypeConfig | None,
    team: SlurmTeamConfig | None,
    config: SlurmQueueConfig,
    speed: float,
) -> submit.Submission | str:
    """The sbatch call of a run, its program written in its team's directory; or why it
    cannot be submitted (no mapping for its type, no Unix user for its team, a working
    directory that does not exist). Counts the attempt on the row, which the caller
    writes. ``speed``: the run's instance type's."""
    if mapping is None:
        type_name = job.instance_type.name if job.instance_type else "?"
        return f"no Slurm mapping for instance type {type_name}"
    if team is None:
        return (
            "the job's team has no Unix user in the queue's Slurm mapping: its jobs do not "
            "run as the product's user (docs/slurm.md#security-model)"
        )
    workdir = (job.program or {}).get("workdir")
    if workdir and settings.SLURM_CHECK_WORKDIR and not os.path.isdir(workdir):
        return f"the working directory {workdir} does not exist"
    count = int(job.preferences[job.preference or 0]["count"])
    limit = None
    if job.duration is not None:
        limit = max(0.0, job.duration - job.checkpoint_work) / speed * 1.5 + 60
    try:
        ident, output_dir, team_ckpt = _team_dirs(team.unix_user)
        checkpoint_dir = identity.owned_dir(team_ckpt, str(job.pk), ident)
        sub = submit.build(
            name=slurm_run.name,
            job_id=job.pk,
            run=job.run,
            count=count,
            mapping=submit.TypeMapping(
                partition=mapping.partition,
                feature=mapping.feature,
                gpus_per_instance=mapping.gpus_per_instance,
                gres_name=mapping.gres_name,
            ),
            program=job.program or {},
            account=team.account or config.account,
            qos=team.qos or config.qos,
            output_dir=output_dir,
            checkpoint_dir=checkpoint_dir,
            resume_work=job.checkpoint_work,
            time_limit_seconds=limit,
            user_env=ident.env(),
        )
        identity.write_program(output_dir, os.path.basename(sub.program_path), sub.program, ident)
    except identity.IdentityError as exc:
        return f"the team's Unix user cannot run it: {exc}"
    except (OSError, ValueError) as exc:
        return f"the team's directories could not be prepared: {exc}"
    slurm_run.attempts += 1
    slurm_run.stdout = sub.stdout
    slurm_run.partition = mapping.partition
    slurm_run.unix_user = ident.user
    return dataclasses.replace(sub, uid=ident.uid, gid=ident.gid)


def _record(
    job: Job,
    slurm_run: SlurmRun,
    sub: submit.Submission | str,
    answer: int | SlurmError | None,
    now: datetime,
    result: SyncResult,
) -> None:
    """A run that was not submitted: it cannot be (``sub`` says why: it fails), or sbatch
    failed (audited, retried with backoff, failed after repeated refusals). Answers with a
    Slurm job id are recorded by the caller, all at once."""
    if isinstance(sub, str):
        _give_up(job, slurm_run, now, sub, result)
        return
    exc = answer if isinstance(answer, SlurmError) else SlurmError("no answer")
    refused = not isinstance(exc, SlurmUnreachable)
    slurm_run.retry_at = now + timedelta(seconds=backoff(slurm_run.attempts))
    slurm_run.save(update_fields=["retry_at"])
    result.errors.append(str(exc))
    slurm_services.executor_failed(
        queue_id=job.queue_id,
        now=now,
        message=f"sbatch of {slurm_run.name} (attempt {slurm_run.attempts}): {exc}",
        retry_in=0,
    )
    if refused and slurm_run.attempts >= MAX_SUBMIT_ATTEMPTS:
        _give_up(job, slurm_run, now, f"Slurm refused the job: {exc}", result)


def _give_up(job: Job, slurm_run: SlurmRun, now: datetime, why: str, result: SyncResult) -> None:
    _end(slurm_run, "NOT_SUBMITTED", None, now)
    runs.run_fail(actor=None, job_id=job.pk, run=slurm_run.run, now=now, message=why[:2000])
    result.failed += 1


def _checkpoints(queue_id: int, now: datetime) -> None:
    """Checkpoints a job wrote (``$GOV_CHECKPOINT_DIR/progress``: the work units its last
    checkpoint saved), reported as the run's checkpoints (docs/slurm.md)."""
    # The running jobs with the Unix user of their current run (one query).
    for job_id, run, work, duration, user in (
        SlurmRun.objects.filter(
            job__queue_id=queue_id, job__state=JobState.RUNNING, run=F("job__run")
        )
        .exclude(unix_user="")
        .values_list("job_id", "run", "job__checkpoint_work", "job__duration", "unix_user")
    ):
        # The team's own directory (docs/slurm.md#security-model): no other team can
        # write there, and a link the team left there is not followed.
        path = os.path.join(settings.SLURM_CHECKPOINT_DIR, user, str(job_id), "progress")
        try:
            saved = float(identity.read_small(path).strip() or "nan")
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not saved > work:
            continue
        if duration is not None:
            saved = min(saved, float(duration))
        try:
            runs.run_report(
                actor=None, job_id=job_id, run=run, kind="checkpoint", now=now, work=saved
            )
        except ServiceError as exc:
            log.info("checkpoint of job %s refused: %s", job_id, exc)
