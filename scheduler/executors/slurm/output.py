"""A Slurm job's verdict on its own output (docs/slurm.md#output-valid): the file
``$GOV_CHECKPOINT_DIR/output_valid`` holding ``true`` or ``false``, read when the job's
completion is reported. Only a run that resumed after a preemption and names a workload
is read: only its verdict says anything about recovery (docs/workloads.md)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import datetime

from django.conf import settings

from governance.models import Job, SlurmRun
from governance.services import runs
from scheduler.executors.slurm import identity

log = logging.getLogger(__name__)

FILE_NAME = "output_valid"
VERDICTS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def read_verdict(user: str, job_id: int) -> bool | None:
    """What the job wrote in its team's checkpoint directory (never through a link), or
    None: no file, or words that are no verdict."""
    path = os.path.join(settings.SLURM_CHECKPOINT_DIR, user, str(job_id), FILE_NAME)
    try:
        text = identity.read_small(path).strip().lower()
    except (OSError, UnicodeDecodeError):
        return None
    verdict = VERDICTS.get(text)
    if verdict is None:
        log.info("job %s: %s says %r, neither true nor false", job_id, FILE_NAME, text[:20])
    return verdict


def report_verdicts(done: Sequence[Job], ended: Sequence[SlurmRun], now: datetime) -> int:
    """After a wave of completions (``done``, from the runs ``ended``): the verdicts of
    the resumed runs that name a workload, reported through the run services. Returns
    how many were reported."""
    users = {r.job_id: r.unix_user for r in ended if r.unix_user}
    verdicts = []
    for job in done:
        if job.workload_id is None or job.preemptions == 0 or job.pk not in users:
            continue
        verdict = read_verdict(users[job.pk], job.pk)
        if verdict is not None:
            verdicts.append((job, verdict))
    if verdicts:
        runs.runs_output_reported(verdicts=verdicts, now=now)
    return len(verdicts)
