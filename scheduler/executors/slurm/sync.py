"""One pass of the slurm executor over one queue (``sync_queue``).

A pass reads Slurm (``squeue`` for its jobs, ``sacct -c`` for jobs gone from
squeue, ``sinfo --json`` for nodes), then, in DESIGN's order within an instant:

1. reports what each Slurm job did through the run services (started, completed,
   failed with its exit code, node failure as ``capacity_lost``, unknown to Slurm as lost)
   and confirms the end of runs the product stopped;
2. sets each type's capacity from the usable nodes, so a node going down reaches the
   engine as lost capacity and a node coming back as new capacity;
3. runs the queue's scheduling cycle (``scheduler.bridge.run_cycle``);
4. submits each new admission (one ``sbatch`` per run, its row written first so a lost
   answer is found again by the job's name, never submitted twice) and stops runs the
   product preempted or cancelled: a signal first, a cancel after the grace period.

If Slurm cannot be reached the pass changes nothing and the executor pauses (the pages
say since when); passes retry with backoff until Slurm answers. Passes of one queue never
overlap (a PostgreSQL advisory lock).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache, cached_property
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
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
    SlurmTypeConfig,
)
from governance.models.capacity import Executor
from governance.services import hooks, runs
from governance.services import slurm as slurm_services
from governance.services.errors import ServiceError
from governance.services.kit import job_event
from scheduler import bridge
from scheduler.executors.slurm import submit
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
    cycle: bridge.CycleResult | None = None
    errors: list[str] = field(default_factory=list)


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
def queue_lock(queue_id: int) -> Iterator[bool]:
    """One pass per queue at a time, across workers (a session-level advisory lock, tried
    without waiting: a pass that finds it taken is skipped)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_CLASS, queue_id])
        got = bool(cursor.fetchone()[0])
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


def hook_pass(queue_id: int, slurm_job_id: int, *, cli: Cli | None = None) -> dict[str, object]:
    """The pass the completion hook asks for (``services.slurm.slurm_job_ended``).

    The jobs of one wave end together; the first hook runs the pass, which reports them
    all and holds that hook's node until it has submitted what runs next. One node is
    enough: the controller schedules every pending job when any epilog ends. So a hook
    whose job a pass reported returns as soon as its node may go (``_Releasing``): at
    once for a hook's pass, which holds its own node past its submissions, and once its
    submissions are sent for a regular pass, which holds none. A hook whose job the
    running pass did not report (it ended after that pass read Slurm) waits for the pass
    to end and runs one itself."""
    result = SyncResult(queue_id=queue_id)
    deadline = time.monotonic() + settings.SLURM_HOOK_WAIT_SECONDS
    while True:
        with queue_lock(queue_id) as got:
            if got:
                if _unreported(queue_id, slurm_job_id):
                    _sync(queue_id, cli or cli_from_settings(), result, settle=False)
                else:  # the pass that reported it has ended
                    result.skipped = "an earlier pass reported the job's end"
                break
        if not _wait_for(NODES_CLASS, queue_id, deadline - time.monotonic()):
            result.skipped = "another pass of this queue ran too long"
            break
        if not _unreported(queue_id, slurm_job_id):
            result.skipped = "a pass reported the job's end and released its node"
            break
        if not _wait_for(LOCK_CLASS, queue_id, deadline - time.monotonic()):
            result.skipped = "another pass of this queue ran too long"
            break
    return {
        "skipped": result.skipped,
        "paused": result.paused,
        "completed": result.completed,
        "failed": result.failed,
        "lost": result.lost,
        "stopped": result.stopped,
        "started": result.started,
        "submitted": result.submitted,
    }


def sync_queue(queue_id: int, *, cli: Cli | None = None) -> SyncResult:
    """One pass over one queue (see the module's docstring)."""
    cli = cli or cli_from_settings()
    result = SyncResult(queue_id=queue_id)
    with queue_lock(queue_id) as got:
        if not got:
            result.skipped = "another pass of this queue is running"
            return result
        _sync(queue_id, cli, result)
    return result


@dataclass
class _Reported:
    """What the pass read and reported, for the rest of the pass."""

    config: SlurmQueueConfig
    slurm: _SlurmJobs
    nodes: list[dict[str, Any]] | None
    starts: list[SlurmRun]  # runs seen started: reported by a regular pass's last part
    now: datetime


def _sync(queue_id: int, cli: Cli, result: SyncResult, *, settle: bool = True) -> None:
    """The pass. Without ``settle`` (the completion hook's pass, which holds a node) it
    reads no nodes and ends once the stops and submissions are sent: node changes, start
    reports and checkpoints are for the next pass."""
    releasing = _Releasing(queue_id)
    try:
        if not settle:  # hooks that call meanwhile find their job's end in what it reads
            time.sleep(settings.SLURM_HOOK_GATHER_SECONDS)
        reported = _report(queue_id, cli, result, settle=settle)
        if not settle:  # this hook holds its node until it has submitted
            releasing.release()
        if reported is None:
            return
        _decide_and_submit(queue_id, cli, result, reported)
    finally:
        releasing.release()
    if settle:
        _settle(queue_id, result, reported.starts, reported.now)


def _decide_and_submit(queue_id: int, cli: Cli, result: SyncResult, reported: _Reported) -> None:
    """The pass's second part: capacity, the cycle, then the stops and submissions."""
    config, slurm, nodes, now = reported.config, reported.slurm, reported.nodes, reported.now
    if nodes is not None:
        result.capacity = _observe_capacity(queue_id, nodes, now)
    result.cycle = bridge.run_cycle(queue_id)
    now = timezone.now()
    _stop(queue_id, cli, config, slurm, now, result)
    _submit_admitted(queue_id, cli, config, slurm, now, result)


def _settle(queue_id: int, result: SyncResult, starts: list[SlurmRun], now: datetime) -> None:
    """A regular pass's last part: start reports and checkpoints (a hook's pass leaves
    them to the next regular pass)."""
    if starts:
        # A run preempted meanwhile is left out: the stop step handles it.
        with transaction.atomic():
            by_state: dict[str, list[int]] = {}
            for slurm_run in starts:
                slurm_run.started_seen = True
                by_state.setdefault(slurm_run.slurm_state, []).append(slurm_run.pk)
            for slurm_state, pks in by_state.items():
                SlurmRun.objects.filter(pk__in=pks).update(
                    started_seen=True, slurm_state=slurm_state
                )
            reported = runs.runs_started(started=[(r.job_id, r.run) for r in starts], now=now)
            result.started += len(reported)
    _checkpoints(queue_id, now)


def _report(queue_id: int, cli: Cli, result: SyncResult, *, settle: bool) -> _Reported | None:
    """The pass's first part: read Slurm and report what each run's job did (committed
    when this returns). Returns what the rest of the pass needs; None when Slurm could not
    be read or the executor backs off."""
    config, _ = SlurmQueueConfig.objects.get_or_create(queue_id=queue_id)
    now = timezone.now()
    if config.retry_at is not None and now < config.retry_at:
        result.paused = config.paused_since is not None
        result.skipped = "backing off after a failure"
        return None
    prefix = f"{settings.SLURM_JOB_PREFIX}-"
    active = list(
        SlurmRun.objects.filter(job__queue_id=queue_id)
        .exclude(state=SlurmRunState.ENDED)
        .select_related("job")
        .order_by("id")
    )
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
    if not slurm.read:  # the hook's pass follows only the runs the completion log has news of
        active = [r for r in active if r.slurm_job_id in finished]
    by_id = slurm.by_id if slurm.read else {}

    # One transaction for every report of the pass: each report is its own savepoint
    # (the run services are atomic), and a pass costs one commit, not one per report.
    # Ends first, starts after the submissions: what a completion frees is resubmitted
    # before the pass spends time on the start reports of runs already running.
    starts: list[SlurmRun] = []
    completions: list[SlurmRun] = []  # reported together: a wave of jobs ends together
    # The pass runs the queue's cycle itself once the reports are in: the changes they make
    # ask for no other cycle.
    with hooks.collect_changes(), transaction.atomic():
        for slurm_run in active:
            if slurm_run.slurm_job_id is None:
                _find_again(slurm_run, slurm)
            try:  # the run services are atomic: a refusal leaves the pass's transaction usable
                _follow(slurm_run, by_id, finished, now, result, starts, completions)
            except ServiceError as exc:  # a report the run services refuse (an old run)
                log.info("report for %s refused: %s", slurm_run.name, exc)
        if completions:
            SlurmRun.objects.filter(pk__in=[r.pk for r in completions]).update(
                state=SlurmRunState.ENDED, slurm_state="COMPLETED", exit_code=0, ended_at=now
            )
            done = runs.runs_complete(done=[(r.job_id, r.run) for r in completions], now=now)
            result.completed += len(done)

    return _Reported(config, slurm, nodes, starts, now)


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
    if found is None:
        return False
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


ENDED_FIELDS = ["state", "slurm_state", "exit_code", "ended_at"]


def _end(
    slurm_run: SlurmRun, state: str | None, code: int | None, now: datetime, *, save: bool = True
) -> None:
    slurm_run.state = SlurmRunState.ENDED
    slurm_run.slurm_state = state or "UNKNOWN"
    slurm_run.exit_code = code
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
    if state == "COMPLETED" and code == 0:
        _end(slurm_run, state, code, now, save=False)
        completions.append(slurm_run)  # the caller reports them all at once
        return
    _end(slurm_run, state, code, now)
    how = f"exit code {code}" if code is not None else f"signal {sig}"
    if state in LOST_MACHINES:
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


def _observe_capacity(
    queue_id: int, nodes: list[dict[str, Any]], now: datetime
) -> dict[str, int] | None:
    """Each mapped type's capacity from the usable nodes of its partition/feature."""
    capacity: dict[str, int] = {}
    unusable: set[str] = set()
    for mapping in SlurmTypeConfig.objects.filter(queue_id=queue_id).select_related(
        "instance_type"
    ):
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
    return slurm_services.queue_capacity_observed(
        queue_id=queue_id,
        capacity=capacity,
        now=now,
        explanation=f"Capacity as Slurm reports it; unusable nodes: {nodes_text}.",
    )


def _stop(
    queue_id: int,
    cli: Cli,
    config: SlurmQueueConfig,
    slurm: _SlurmJobs,
    now: datetime,
    result: SyncResult,
) -> None:
    """Signal, then cancel after the grace period, every Slurm job whose run is over."""
    for slurm_run in (
        SlurmRun.objects.filter(job__queue_id=queue_id)
        .exclude(state=SlurmRunState.ENDED)
        .select_related("job")
        .order_by("id")
    ):
        job = slurm_run.job
        current = job.state == JobState.RUNNING and job.run == slurm_run.run
        if current and slurm_run.state != SlurmRunState.STOPPING:
            continue
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
            elif slurm_run.retry_at is None or now >= slurm_run.retry_at:
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


def _submit_admitted(
    queue_id: int,
    cli: Cli,
    config: SlurmQueueConfig,
    slurm: _SlurmJobs,
    now: datetime,
    result: SyncResult,
) -> None:
    """One sbatch per admitted run without a Slurm job (and retries of failed ones).

    Three steps: the runs' rows are written and committed first (one transaction), so
    that a submission whose answer is lost is found again by its name; then the sbatch
    calls, several at once; then their answers are recorded (one transaction).
    """
    running = list(
        Job.objects.filter(queue_id=queue_id, state=JobState.RUNNING)
        .select_related("instance_type")
        .order_by("run_started_at", "id")
    )
    if not running:
        return
    existing = {
        (r.job_id, r.run): r
        for r in SlurmRun.objects.filter(job__in=[j.pk for j in running]).order_by("id")
    }
    mappings = {m.instance_type_id: m for m in SlurmTypeConfig.objects.filter(queue_id=queue_id)}
    todo: list[tuple[Job, SlurmRun, submit.Submission | None]] = []
    new_runs: list[SlurmRun] = []
    for job in running:
        slurm_run = existing.get((job.pk, job.run))
        if slurm_run is None:
            slurm_run = SlurmRun(
                job=job,
                run=job.run,
                name=submit.job_name(settings.SLURM_JOB_PREFIX, job.pk, job.run),
                created_at=now,
            )
            new_runs.append(slurm_run)
        elif (
            slurm_run.state != SlurmRunState.SUBMITTING
            or slurm_run.slurm_job_id
            or (slurm_run.retry_at is not None and now < slurm_run.retry_at)
        ):
            continue
        else:  # a retry: first look for the job an earlier sbatch may have made
            try:
                if _find_again(slurm_run, slurm):
                    continue
            except SlurmError:
                continue  # not submitted blind: the next pass looks again
        mapping = mappings.get(job.instance_type_id) if job.instance_type_id else None
        todo.append((job, slurm_run, _prepare(job, slurm_run, mapping, config)))
    if not todo:
        return
    retried = [r for _, r, sub in todo if sub is not None and r.pk is not None]
    try:  # written and committed before any sbatch: a lost answer is found by the name
        with transaction.atomic():
            SlurmRun.objects.bulk_create(new_runs)
            SlurmRun.objects.bulk_update(retried, ["attempts", "stdout", "partition"])
    except IntegrityError:  # a row written meanwhile (passes of a queue never overlap)
        log.warning("slurm runs of queue %s written elsewhere; the next pass submits", queue_id)
        return

    def call(item: tuple[Job, SlurmRun, submit.Submission | None]) -> int | SlurmError | None:
        sub = item[2]
        if sub is None:
            return None
        try:
            return cli.sbatch(sub.script, sub.options, sub.env)
        except SlurmError as exc:
            return exc

    answers = list(_threads().map(call, todo))
    submitted: list[SlurmRun] = []
    with transaction.atomic():
        for (job, slurm_run, sub), answer in zip(todo, answers, strict=True):
            if sub is not None and isinstance(answer, int):
                _adopt(slurm_run, answer, slurm_run.partition, save=False)
                submitted.append(slurm_run)
                result.submitted += 1
                continue
            with transaction.atomic():
                _record(job, slurm_run, sub, answer, now, result)
        # What differs per run in one statement; what every run shares in another.
        SlurmRun.objects.bulk_update(submitted, ["slurm_job_id", "stdout", "stderr"])
        SlurmRun.objects.filter(pk__in=[r.pk for r in submitted]).update(
            state=SlurmRunState.SUBMITTED, retry_at=None
        )


def _prepare(
    job: Job, slurm_run: SlurmRun, mapping: SlurmTypeConfig | None, config: SlurmQueueConfig
) -> submit.Submission | None:
    """The sbatch call of a run (None without a mapping for its type); counts the attempt
    on the row, which the caller writes."""
    if mapping is None:
        return None
    count = int(job.preferences[job.preference or 0]["count"])
    speed = float(job.instance_type.speed) if job.instance_type else 1.0
    limit = None
    if job.duration is not None:
        limit = max(0.0, job.duration - job.checkpoint_work) / speed * 1.5 + 60
    checkpoint_dir = os.path.join(settings.SLURM_CHECKPOINT_DIR, str(job.pk))
    output_dir = settings.SLURM_OUTPUT_DIR
    for path in (checkpoint_dir, output_dir):
        os.makedirs(path, exist_ok=True)
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
        account=config.account,
        qos=config.qos,
        output_dir=output_dir,
        checkpoint_dir=checkpoint_dir,
        resume_work=job.checkpoint_work,
        time_limit_seconds=limit,
    )
    slurm_run.attempts += 1
    slurm_run.stdout = sub.stdout
    slurm_run.partition = mapping.partition
    return sub


def _record(
    job: Job,
    slurm_run: SlurmRun,
    sub: submit.Submission | None,
    answer: int | SlurmError | None,
    now: datetime,
    result: SyncResult,
) -> None:
    """A run that was not submitted: its type has no Slurm mapping (it fails), or sbatch
    failed (audited, retried with backoff, failed after repeated refusals). Answers with a
    Slurm job id are recorded by the caller, all at once."""
    if sub is None:
        type_name = job.instance_type.name if job.instance_type else "?"
        _give_up(job, slurm_run, now, f"no Slurm mapping for instance type {type_name}", result)
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
    for job in Job.objects.filter(queue_id=queue_id, state=JobState.RUNNING).only(
        "id", "run", "checkpoint_work", "duration"
    ):
        path = os.path.join(settings.SLURM_CHECKPOINT_DIR, str(job.pk), "progress")
        try:
            with open(path, encoding="ascii") as handle:
                saved = float(handle.read(64).strip() or "nan")
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not saved > job.checkpoint_work:
            continue
        if job.duration is not None:
            saved = min(saved, float(job.duration))
        try:
            runs.run_report(
                actor=None, job_id=job.pk, run=job.run, kind="checkpoint", now=now, work=saved
            )
        except ServiceError as exc:
            log.info("checkpoint of job %s refused: %s", job.pk, exc)
