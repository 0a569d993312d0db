"""What a pass tells Slurm once its cycle committed: the orders (``SlurmOrders``, worked
out in the cycle's transaction), then stops (a signal first, a cancel after the grace
period) and submissions (one ``sbatch`` per run as its team's Unix user, several at
once; ``submit.py`` builds the call), and sbatch's answers recorded.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache

from django.conf import settings
from django.db import connection

from governance.models import (
    Job,
    SlurmQueueConfig,
    SlurmRun,
    SlurmRunState,
    SlurmTeamConfig,
    SlurmTypeConfig,
)
from governance.services import runs
from governance.services import slurm as slurm_services
from scheduler.cycle.snapshot import QueueSnapshot
from scheduler.engine import Decision, DecisionKind
from scheduler.executors.slurm import identity, submit
from scheduler.executors.slurm.cli import (
    TERMINAL_STATES,
    Cli,
    SlurmError,
    SlurmUnreachable,
    job_state,
)
from scheduler.executors.slurm.read import SlurmJobs, adopt, backoff, find_again, threads
from scheduler.executors.slurm.report import LIVE_STATES, end_run
from scheduler.executors.slurm.result import SyncResult

log = logging.getLogger(__name__)

MAX_SUBMIT_ATTEMPTS = 5
RECANCEL_SECONDS = 5.0


class SlurmOrders:
    """What the pass tells Slurm after its cycle, worked out in the cycle's transaction
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

    def write(self, snapshot: QueueSnapshot, decisions: Sequence[Decision]) -> None:
        """Work the orders out (the cycle's ``within_cycle``) and write the rows of the
        runs to submit, with the cycle's admissions."""
        running = snapshot.running_after(decisions)
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
        admitted = {int(d.job) for d in decisions if d.kind == DecisionKind.ADMITTED}
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
        self.speeds = snapshot.speed_by_type_id()
        snapshot.jobs.prefetch(str(key) for key in missing)
        new_runs: list[SlurmRun] = []
        for key in missing:
            job = snapshot.jobs[str(key)]
            slurm_run = SlurmRun(
                job=job,
                run=job.run,
                name=submit.job_name(settings.SLURM_JOB_PREFIX, job.pk, job.run),
                created_at=snapshot.now,
            )
            new_runs.append(slurm_run)
            self.todo.append((job, slurm_run, self.prepare(job, slurm_run)))
        # Written with the admissions: a submission whose answer is lost is found again.
        SlurmRun.objects.bulk_create(new_runs)

    def prepare(self, job: Job, slurm_run: SlurmRun) -> submit.Submission | str:
        type_id = job.instance_type_id
        mapping = self.mappings.get(type_id) if type_id else None
        return prepare(
            job,
            slurm_run,
            mapping,
            self.teams.get(job.share_id),
            self.config,
            self.speeds.get(type_id or 0, 1.0),
        )


def submit_runs(
    cli: Cli, slurm: SlurmJobs, now: datetime, result: SyncResult, plan: SlurmOrders
) -> list[SlurmRun]:
    """One sbatch per run the plan submits (its row written with the cycle) and per failed
    submission due again, several at once. Returns the runs Slurm took, their job ids set
    (``record_answers`` records them); failures are recorded here. A retry is first looked
    for in Slurm under its name: the sbatch that failed may have made the job and lost
    only its answer."""
    todo = list(plan.todo)
    retried: list[SlurmRun] = []
    for job, slurm_run in plan.retries:
        if slurm_run.retry_at is not None and now < slurm_run.retry_at:
            continue
        try:
            if find_again(slurm_run, slurm):
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

    answers = list(threads().map(call, todo))
    submitted: list[SlurmRun] = []
    for (job, slurm_run, sub), answer in zip(todo, answers, strict=True):
        if not isinstance(sub, str) and isinstance(answer, int):
            adopt(slurm_run, answer, slurm_run.partition, save=False)
            submitted.append(slurm_run)
            result.submitted += 1
        else:
            record_refusal(job, slurm_run, sub, answer, now, result)
    return submitted


def record_answers(slurm_runs: list[SlurmRun]) -> None:
    """Record the Slurm job ids sbatch answered, in one statement (``adopt`` set them on
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


def stop(
    queue_id: int,
    cli: Cli,
    config: SlurmQueueConfig,
    slurm: SlurmJobs,
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
        if slurm_run.slurm_job_id is None and not find_again(slurm_run, slurm):
            end_run(slurm_run, "NEVER_SUBMITTED", None, now)
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


def prepare(
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


def record_refusal(
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
        give_up(job, slurm_run, now, sub, result)
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
        give_up(job, slurm_run, now, f"Slurm refused the job: {exc}", result)


def give_up(job: Job, slurm_run: SlurmRun, now: datetime, why: str, result: SyncResult) -> None:
    end_run(slurm_run, "NOT_SUBMITTED", None, now)
    runs.run_fail(actor=None, job_id=job.pk, run=slurm_run.run, now=now, message=why[:2000])
    result.failed += 1
