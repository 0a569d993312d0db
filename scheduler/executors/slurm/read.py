"""Reading Slurm: what a pass knows before it changes anything (``Seen``).

``squeue`` for the product's jobs (``SlurmJobs``, read once per pass when first needed),
``sacct -c`` for jobs gone from squeue or completing, ``sinfo --json`` for nodes (a
regular pass only). If Slurm cannot be read the executor pauses (``read_slurm`` answers
None) and passes back off until it answers. Also: a submission whose answer was lost is
found again by its name (``find_again``), never submitted twice.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, cached_property
from typing import Any

from django.conf import settings
from django.utils import timezone

from governance.models import SlurmQueueConfig, SlurmRun, SlurmRunState
from governance.services import slurm as slurm_services
from scheduler.executors.slurm.cli import Cli, Finished, SlurmError, job_state
from scheduler.executors.slurm.result import SyncResult

MAX_BACKOFF_SECONDS = 30.0
# Up to this many active runs the hook's pass asks the completion log about each of them
# instead of listing the queue (one sacct call: it takes 1,000 ids at once).
HOOK_SACCT_ONLY = 1000
SUBMIT_THREADS = 16  # sbatch calls at once (each waits on the controller)


def cli_from_settings() -> Cli:
    return Cli(
        conf=settings.SLURM_CONF,
        timeout=settings.SLURM_COMMAND_TIMEOUT,
        bin_dir=settings.SLURM_BIN_DIR,
    )


@cache
def threads() -> ThreadPoolExecutor:
    """The Slurm commands a pass runs at once (its reads, its sbatch calls), on threads
    kept from pass to pass: starting 16 threads per pass cost more than the calls'
    bookkeeping. Made on first use, so in the process that runs passes (never in a parent
    that forks its workers later)."""
    return ThreadPoolExecutor(max_workers=SUBMIT_THREADS, thread_name_prefix="slurm")


def backoff(failures: int) -> float:
    """Seconds before the next attempt after ``failures`` failures in a row."""
    return float(min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** max(0, failures - 1)))


class SlurmJobs:
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


@dataclass
class Seen:
    """What the pass read before it changes anything, for the rest of the pass."""

    config: SlurmQueueConfig
    slurm: SlurmJobs
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


def open_runs(queue_id: int) -> list[SlurmRun]:
    """The queue's runs not ended, with their jobs."""
    return list(
        SlurmRun.objects.filter(job__queue_id=queue_id)
        .exclude(state=SlurmRunState.ENDED)
        .select_related("job")
        .order_by("id")
    )


def read_slurm(queue_id: int, cli: Cli, result: SyncResult, *, settle: bool) -> Seen | None:
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
    active = open_runs(queue_id)
    slurm = SlurmJobs(cli, prefix)
    try:
        if settle or len(active) > HOOK_SACCT_ONLY:
            # Two independent reads at once (the hook's pass leaves the nodes to the next
            # pass: a node's change waits half a second, the node the hook holds does not).
            nodes_call = threads().submit(cli.sinfo_nodes) if settle else None
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
    return Seen(config, slurm, nodes, now, active, followed, by_id, finished)


def still_open(seen: Seen) -> None:
    """Once the queue is locked: keep, of what was read, the runs that are still open (a
    hook's pass may have reported some since), as they are now. A run submitted since is
    left to the next pass: Slurm was read before it existed."""
    read = {r.pk for r in seen.followed}
    seen.active = open_runs(seen.config.queue_id)
    seen.followed = [r for r in seen.active if r.pk in read]
    for slurm_run in seen.followed:
        if slurm_run.slurm_job_id is None:  # a lost sbatch answer: found again by its name
            find_again(slurm_run, seen.slurm)


ADOPTED_FIELDS = ["slurm_job_id", "state", "stdout", "stderr", "partition", "retry_at"]


def find_again(slurm_run: SlurmRun, slurm: SlurmJobs) -> bool:
    """Adopt the Slurm job an earlier sbatch made under the run's name, whose answer was
    lost; False when Slurm lists none."""
    found = slurm.by_name.get(slurm_run.name)
    if found is None or (slurm_run.unix_user and found.get("user") != slurm_run.unix_user):
        return False  # none, or a job of another user under the run's name
    adopt(slurm_run, int(found["job_id"]), str(found.get("partition", "")))
    return True


def adopt(slurm_run: SlurmRun, slurm_job_id: int, partition: str, *, save: bool = True) -> None:
    slurm_run.slurm_job_id = slurm_job_id
    slurm_run.state = SlurmRunState.SUBMITTED
    slurm_run.stdout = slurm_run.stdout.replace("%j", str(slurm_job_id))
    slurm_run.stderr = slurm_run.stdout
    slurm_run.partition = partition or slurm_run.partition
    slurm_run.retry_at = None
    if save:
        slurm_run.save(update_fields=ADOPTED_FIELDS)
