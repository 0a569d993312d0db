"""A Slurm job's verdict on its output (docs/slurm.md#output-valid): the file
``$GOV_CHECKPOINT_DIR/output_valid`` read when its completion is reported. The first test
needs no cluster; the second runs the whole path on the local Slurm (skips without it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from governance.models import Job, JobState, RecoveryStatus, SlurmRun, Workload
from governance.services import jobs as job_services
from scheduler.executors.slurm import output
from tests.factories import TeamFactory, make_job, make_member, make_queue, make_share
from tests.slurm.conftest import TYPE_A, drive

pytestmark = pytest.mark.django_db


def test_the_verdict_file_of_a_resumed_run_verifies_or_fails_its_workload(
    settings: Any, tmp_path: Path
) -> None:
    settings.SLURM_CHECKPOINT_DIR = str(tmp_path)
    team = TeamFactory(name="t")
    share = make_share(make_queue("q"), team, "s")
    user = make_member(team, "u")
    good, bad, fresh = (Workload.objects.create(team=team, name=n) for n in ("a", "b", "c"))
    jobs = [
        make_job(share, user, name=w.name, workload=w, preemptions=p, state=JobState.SUCCEEDED)
        for w, p in ((good, 1), (bad, 2), (fresh, 0))
    ]
    for job, words in zip(jobs, ("true\n", "FALSE", "true"), strict=True):
        (tmp_path / "team-u" / str(job.pk)).mkdir(parents=True)
        (tmp_path / "team-u" / str(job.pk) / "output_valid").write_text(words)
    ended = [SlurmRun(job_id=job.pk, unix_user="team-u") for job in jobs]
    assert output.report_verdicts(jobs, ended, timezone.now()) == 2  # not the unresumed one
    for workload, status in ((good, "verified"), (bad, "failed"), (fresh, "unverified")):
        workload.refresh_from_db()
        assert workload.recovery_status == status
    assert [Job.objects.get(pk=j.pk).output_valid for j in jobs] == [True, False, None]
    assert output.read_verdict("team-u", 999) is None  # no file: no verdict


@pytest.mark.slurm
def test_a_resumed_slurm_job_that_writes_output_valid_verifies_its_workload(slurm: Any) -> None:
    workload = Workload.objects.create(team=slurm.borrower.team, name="borrowers/train")
    script = (
        "#!/bin/bash\n"
        'if [ "$GOV_RUN" -gt 1 ]; then echo true > "$GOV_CHECKPOINT_DIR/output_valid"; exit 0; fi\n'
        "sleep 120\n"
    )
    borrower = job_services.job_submit(
        actor=slurm.borrower_user,
        share=slurm.borrower,
        name="resumes",
        preferences=[{"instance_type": TYPE_A, "count": 8}],
        program={"script": script},
        workload=workload.pk,
    )
    drive(slurm, lambda: Job.objects.get(pk=borrower.pk).state == JobState.RUNNING)
    owner = job_services.job_submit(
        actor=slurm.owner_user,
        share=slurm.owner,
        name="reclaims",
        preferences=[{"instance_type": TYPE_A, "count": 4}],
        program={"command": ["sleep", "120"]},
    )
    drive(slurm, lambda: Job.objects.get(pk=borrower.pk).preemptions == 1)
    job_services.job_cancel(actor=slurm.owner_user, job=owner, reason="done with it")
    drive(slurm, lambda: Job.objects.get(pk=borrower.pk).state == JobState.SUCCEEDED, timeout=60)
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.VERIFIED
    assert Job.objects.get(pk=borrower.pk).output_valid is True
