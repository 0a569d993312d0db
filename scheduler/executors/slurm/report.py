"""Reporting: what each Slurm job did, through the run services (``services/runs.py``),
in the cycle's transaction before the cycle reads the queue (``report_ends``): completed,
failed with its exit code or signal, node failure as ``capacity_lost``, unknown to Slurm
as lost; and the end of runs the product stopped, confirmed. The starts and checkpoints
a regular pass saw are reported at its end (``settle``), once what the ends freed is
submitted.
"""

from __future__ import annotations

import logging
import os
import signal
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from governance.models import DecisionRule, JobState, SlurmRun, SlurmRunState
from governance.services import runs
from governance.services.errors import ServiceError
from governance.services.kit import job_event
from scheduler.executors.slurm import identity, output, submit
from scheduler.executors.slurm.cli import TERMINAL_STATES, Finished, exit_status, job_state
from scheduler.executors.slurm.read import Seen
from scheduler.executors.slurm.result import SyncResult

log = logging.getLogger(__name__)

# Slurm states in which a run has lost its machines rather than failed by itself.
LOST_MACHINES = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})
LIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED"})


def report_ends(seen: Seen, result: SyncResult) -> None:
    """Report what each followed run's job did, in the cycle's transaction, before the
    cycle reads the queue: ends first; the starts a regular pass saw are reported at its
    end, once what the ends freed is submitted. A wave of clean completions is reported
    together (one statement per kind of write)."""
    now = seen.now
    completions: list[SlurmRun] = []
    for slurm_run in seen.followed:
        try:  # the run services are atomic: a refusal leaves the pass's transaction usable
            follow(slurm_run, seen.by_id, seen.finished, now, result, seen.starts, completions)
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


def status(
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


def end_run(
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


def follow(
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
    state, code, sig = status(slurm_run, by_id, finished)
    sid = slurm_run.slurm_job_id
    if slurm_run.state == SlurmRunState.STOPPING or not current:
        if state is None or state in TERMINAL_STATES:
            end_run(slurm_run, state, code, now)
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
        end_run(slurm_run, None, None, now)
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
        end_run(slurm_run, state, code, now, save=False)
        completions.append(slurm_run)  # the caller reports them all at once
        return
    end_run(slurm_run, state, code, now, sig=sig)
    _report_failure(slurm_run, state, code, sig, now, result)


def _report_failure(
    slurm_run: SlurmRun,
    state: str,
    code: int | None,
    sig: int | None,
    now: datetime,
    result: SyncResult,
) -> None:
    """Report a run whose Slurm job ended otherwise than cleanly: its node failed (the
    job is requeued), it was cancelled outside the product, or it failed."""
    job, sid = slurm_run.job, slurm_run.slurm_job_id
    words = how(code, sig)
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
            message=f"Slurm job {sid} was cancelled in Slurm, outside the product ({words}).",
        )
        result.failed += 1
    else:
        runs.run_fail(
            actor=None,
            job_id=job.pk,
            run=slurm_run.run,
            now=now,
            message=f"Slurm job {sid} ended {state} with {words}.",
        )
        result.failed += 1


def how(code: int | None, sig: int | None) -> str:
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


def settle(queue_id: int, result: SyncResult, starts: list[SlurmRun], now: datetime) -> None:
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
    checkpoints(queue_id, now)


def checkpoints(queue_id: int, now: datetime) -> None:
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
