"""One pass of the slurm executor over one queue (``sync_queue``), the driver of the
Slurm modules: ``read`` (Slurm), ``report``, ``drift`` (the guard and the capacity),
``orders`` (stops and submissions), handed to the cycle as its executor
(``executor.PassExecutor``).

A pass reads Slurm (``squeue`` for every user's jobs, ``sacct -c`` for jobs gone from
squeue, ``sinfo --json`` for nodes), then runs the queue's scheduling cycle
(``cycle``: ``scheduler.cycle.run.run_cycle``, handed in by whoever starts the pass, beat's
task or the completion hook's receiver) with that executor, which in this order within an
instant:

1. reports what each Slurm job did through the run services (completed, failed with its
   exit code or signal, node failure as ``capacity_lost``, unknown to Slurm as lost) and
   confirms the end of runs the product stopped (``before_cycle``);
2. the drift guard (regular passes): jobs on the queue's partitions beyond what the
   product admitted are recorded, and the GPUs they hold set aside;
3. sets each type's capacity from the usable nodes (read again when a run's node failed)
   less those GPUs, so a node going down reaches the engine as lost capacity before
   anything is admitted, and a node coming back as new capacity;
4. lets the cycle decide, and writes the rows of the runs to submit with its admissions
   (``within_cycle``): 1 to 4 are the cycle's one transaction;
5. once committed (``after_commit``), cancels what the drift guard found (unless the
   queue only reports), stops runs the product preempted or cancelled (a signal first, a
   cancel after the grace period) and submits each new admission as its team's Unix user
   (one ``sbatch`` per run, its row written with the admission so a lost answer is found
   again by the job's name, never submitted twice); then the pass records sbatch's
   answers, the usage history, and the starts it saw.

If Slurm cannot be reached the pass changes nothing and the executor pauses (the pages
say since when); passes retry with backoff until Slurm answers. Passes of one queue never
overlap (a PostgreSQL advisory lock): a regular pass takes it once it has read Slurm, a
completion hook's pass (``hook_pass``) before, as the hooks of one wave wait on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from governance.models import JobQueue, SlurmRun, SlurmRunState
from governance.models.capacity import Executor
from scheduler.cycle.result import CycleResult
from scheduler.cycle.snapshot import QueueSnapshot
from scheduler.engine import Decision
from scheduler.executors.base import RunCycle
from scheduler.executors.slurm import drift, orders, read, report
from scheduler.executors.slurm.cli import Cli, SlurmError
from scheduler.executors.slurm.executor import SlurmExecutor
from scheduler.executors.slurm.result import SyncResult

LOCK_CLASS = 0x51A7  # advisory lock namespace of the slurm executor
NODES_CLASS = 0x51A8  # held by a pass until hooks whose jobs it reported may go (``_Releasing``)
LOCK_POLL_SECONDS = 0.02  # a regular pass waiting for a hook's pass tries again this often


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


def sync_all(*, cycle: RunCycle, cli: Cli | None = None) -> list[SyncResult]:
    """A pass over every queue run by Slurm (beat's ``slurm-sync`` entry)."""
    ids = JobQueue.objects.filter(executor=Executor.SLURM).values_list("id", flat=True)
    return [sync_queue(queue_id, cycle=cycle, cli=cli) for queue_id in ids]


def hook_pass(
    queue_id: int,
    slurm_job_id: int,
    *,
    cycle: RunCycle,
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
    steps = _hook_steps(queue_id, slurm_job_id, cycle, cli, result)
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
    queue_id: int, slurm_job_id: int, cycle: RunCycle, cli: Cli | None, result: SyncResult
) -> Iterator[None]:
    """``hook_pass``'s steps: they pause once the hook's node may go."""
    deadline = time.monotonic() + settings.SLURM_HOOK_WAIT_SECONDS
    while True:
        with queue_lock(queue_id) as got:
            if got:
                if _unreported(queue_id, slurm_job_id):
                    yield from _pass(queue_id, cycle, cli or read.cli_from_settings(), result)
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


def sync_queue(queue_id: int, *, cycle: RunCycle, cli: Cli | None = None) -> SyncResult:
    """One pass over one queue (see the module's docstring).

    It reads Slurm before it takes the queue's lock and reports the starts and
    checkpoints it saw after it let go: a completion hook arriving meanwhile waits only
    for what passes must not do at once (reporting ends, the cycle, the submissions)."""
    cli = cli or read.cli_from_settings()
    result = SyncResult(queue_id=queue_id)
    seen = read.read_slurm(queue_id, cli, result, settle=True)
    if seen is None:
        return result
    # A hook's pass that runs meanwhile is short: wait for it rather than skip the starts
    # and node changes this pass read (hooks of a busy queue would skip every one).
    with queue_lock(queue_id, wait=settings.SLURM_HOOK_WAIT_SECONDS) as got:
        if not got:
            result.skipped = "another pass of this queue is running"
            return result
        read.still_open(seen)
        _finish(_pass(queue_id, cycle, cli, result, seen=seen))
    report.settle(queue_id, result, seen.starts, seen.now)
    return result


def _pass(
    queue_id: int,
    cycle: RunCycle,
    cli: Cli,
    result: SyncResult,
    *,
    seen: read.Seen | None = None,
) -> Iterator[None]:
    """The pass, in steps, under the queue's lock: it pauses once Slurm has what runs next
    (the node a hook's pass holds may go), before it records what sbatch answered and the
    usage history. Without ``seen`` (the completion hook's pass, which holds a node) it
    reads Slurm itself, only the completion log: node changes, start reports and
    checkpoints are for the next regular pass.

    One transaction, the cycle's, holds everything the pass decides: the reports of what
    Slurm said, the capacity it gives, the cycle's decisions and the rows of the runs to
    submit (``PassExecutor``'s hooks), from the queue as the cycle reads it; nothing is
    read twice. Slurm is told (stops, then submissions) once it has committed."""
    releasing = _Releasing(queue_id)
    hook = seen is None
    executor: PassExecutor | None = None
    try:
        if seen is None:  # hooks that call meanwhile find their job's end in what it reads
            if settings.SLURM_HOOK_GATHER_SECONDS > 0:
                time.sleep(settings.SLURM_HOOK_GATHER_SECONDS)
            seen = read.read_slurm(queue_id, cli, result, settle=False)
        if seen is None:
            return
        executor = PassExecutor(seen, cli, result, hook=hook, release_nodes=releasing.release)
        result.cycle = cycle(queue_id, executor=executor)
    finally:
        releasing.release()
    yield  # Slurm has what runs next
    assert executor is not None and result.cycle is not None
    orders.record_answers(executor.submitted)
    result.cycle.record_usage()


class PassExecutor(SlurmExecutor):
    """The executor one pass hands its cycle: ``seen`` is what the pass read of Slurm,
    ``result`` what the pass did (its steps add to it). ``hook``: the completion hook's
    pass, which holds a node until its submissions are sent and lets the other hooks'
    nodes go (``release_nodes``) as soon as its reports are committed. The usage history
    is the pass's last step (``defers_usage``), after its submissions."""

    defers_usage = True

    def __init__(
        self,
        seen: read.Seen,
        cli: Cli,
        result: SyncResult,
        *,
        hook: bool,
        release_nodes: Callable[[], None],
    ) -> None:
        self.seen = seen
        self.cli = cli
        self.result = result
        self.hook = hook
        self.release_nodes = release_nodes
        self.orders = orders.SlurmOrders(seen.config.queue_id, seen.config, seen.active)
        self.submitted: list[SlurmRun] = []
        """The runs Slurm took (``after_commit``): the pass records their job ids."""

    def before_cycle(self, queue: JobQueue) -> None:
        """What Slurm said, reported before the cycle reads the queue: the runs' ends,
        the drift guard (regular passes) and the capacity the usable nodes give."""
        seen, result = self.seen, self.result
        report.report_ends(seen, result)
        nodes = seen.nodes
        mappings = None
        held: dict[str, int] = {}
        if seen.slurm.read and not self.hook:
            mappings = drift.type_mappings(queue.pk)  # read once for the guard and the capacity
            held = drift.drift_guard(queue.pk, seen, result, mappings)
        if result.nodes_lost:
            # A node failed under a run: capacity as Slurm has it now, before the
            # cycle admits anything (the nodes read with the queue may predate it).
            try:
                nodes = self.cli.sinfo_nodes()
            except SlurmError as exc:
                result.errors.append(str(exc))
        if nodes is not None:
            result.capacity = drift.observe_capacity(queue.pk, nodes, seen.now, held, mappings)

    def within_cycle(self, snapshot: QueueSnapshot, decisions: Sequence[Decision]) -> None:
        self.orders.write(snapshot, decisions)

    def after_commit(self, result: CycleResult) -> None:
        """Tell Slurm: cancel the drift found, stop, submit."""
        self.result.cycle = result
        if self.hook:  # the reports are in: only this hook's node waits for the submissions
            self.release_nodes()
        now = timezone.now()
        seen = self.seen
        drift.cancel_drift(self.cli, self.result)
        orders.stop(
            seen.config.queue_id,
            self.cli,
            seen.config,
            seen.slurm,
            now,
            self.result,
            self.orders.stops,
        )
        self.submitted = orders.submit_runs(self.cli, seen.slurm, now, self.result, self.orders)
