"""The completion hook against the real local Slurm: the node epilog that
scripts/slurm/start configures calls the product (a live server here) when a job ends,
and that call alone reports the end and submits the job the freed capacity goes to; the
test runs no executor pass of its own after the first job started."""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from governance.models import AuditEntry, AuditEvent, Job, JobState, SlurmRun
from governance.services import jobs as job_services
from tests.slurm.conftest import ROOT, TYPE_A, drive

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]
HOOK = str(ROOT / "scripts" / "slurm" / "hook")


@pytest.fixture
def hook_on(live_server: Any, settings: Any) -> Iterator[str]:
    token = secrets.token_urlsafe(16)
    settings.SLURM_HOOK_TOKEN = token
    url = f"{live_server.url}/api/slurm/job-ended/"
    subprocess.run([HOOK, url, token], check=True, capture_output=True)
    try:
        yield url
    finally:
        subprocess.run([HOOK, "--off"], check=True, capture_output=True)


def submit(world: Any, argv: list[str]) -> Job:
    return job_services.job_submit(
        actor=world.borrower_user,
        share=world.borrower,
        name="j",
        preferences=[{"instance_type": TYPE_A, "count": 8}],
        program={"command": argv},
    )


def wait_for(until: Any, timeout: float = 30.0) -> Any:
    """Poll the database only (no executor pass) until ``until()`` is true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = until()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not reached within {timeout} s: {until.__doc__ or until}")


def test_the_epilog_hook_reports_the_end_and_submits_the_next_job(slurm: Any, hook_on: str) -> None:
    first = submit(slurm, ["sleep", "2"])
    # Both take all 8 instances of type A (the borrowers' 4 and the idle owners' 4): the
    # second waits for the first.
    second = submit(slurm, ["sleep", "1"])

    def first_running() -> bool:
        run = SlurmRun.objects.filter(job=first, run=1).first()
        return bool(run and run.started_seen)

    drive(slurm, first_running)
    assert Job.objects.get(pk=second.pk).state == JobState.PENDING

    def second_submitted() -> SlurmRun | None:
        """the hook reported the first job's end and submitted the second"""
        return SlurmRun.objects.filter(job=second, slurm_job_id__isnull=False).first()

    run = wait_for(second_submitted)
    assert Job.objects.get(pk=first.pk).state == JobState.SUCCEEDED
    assert AuditEntry.objects.filter(job_id=first.pk, event_type=AuditEvent.JOB_COMPLETED).exists()
    # Slurm starts the second job when the first one's epilog ends: no pass asked it to.
    wait_for(
        lambda: any(
            j["job_id"] == run.slurm_job_id
            and j["job_state"] in ("RUNNING", "COMPLETING", "COMPLETED")
            for j in slurm.cli.jobs()
        )
    )
