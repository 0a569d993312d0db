"""The completion hook against the real local Slurm: the node epilog that
scripts/slurm/start configures calls the product (a live server here) when a job ends,
and that call alone reports the end and submits the job the freed capacity goes to; the
test runs no executor pass of its own after the first job started."""

from __future__ import annotations

import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from governance.models import (
    AuditEntry,
    AuditEvent,
    Job,
    JobEvent,
    JobState,
    SlurmRun,
    SlurmRunState,
)
from governance.services import jobs as job_services
from governance.services import slurm as slurm_services
from scheduler.cycle.run import run_cycle
from scheduler.executors.slurm import orders, pass_
from scheduler.executors.slurm import read as slurm_read
from scheduler.executors.slurm.cli import Cli
from tests.slurm.conftest import CONF, ROOT, TYPE_A, TYPE_B, drive

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


def submit(
    world: Any, argv: list[str], *, owner: bool = False, type_: str = TYPE_A, count: int = 8
) -> Job:
    """A job of the borrowers (or of the owners) on ``count`` instances of ``type_``."""
    return job_services.job_submit(
        actor=world.owner_user if owner else world.borrower_user,
        share=world.owner if owner else world.borrower,
        name="j",
        preferences=[{"instance_type": type_, "count": count}],
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


def wait_until_logged(slurm: Any, run: SlurmRun) -> None:
    """Poll Slurm's completion log only until it holds the end of ``run``'s Slurm job."""
    wait_for(lambda: run.slurm_job_id in slurm.cli.finished([run.slurm_job_id]))


def short_and_long_running(slurm: Any) -> tuple[Job, Job]:
    """The borrowers' one-second job on type A and two-minute job on type B, both seen
    running in Slurm by the executor's passes."""
    short = submit(slurm, ["sleep", "1"])
    long = submit(slurm, ["sleep", "120"], type_=TYPE_B)

    def both_running() -> bool:
        runs = SlurmRun.objects.filter(job__in=[short, long])
        return runs.count() == 2 and all(r.started_seen for r in runs)

    drive(slurm, both_running)
    return short, long


class CountingCli(Cli):
    """The real command-line client, counting the queue listings it runs."""

    listings = 0

    def jobs(self) -> list[dict[str, Any]]:
        self.listings += 1
        return super().jobs()


def test_the_hooks_pass_reads_the_end_from_the_completion_log_alone(slurm: Any) -> None:
    """The hook's pass holds the ended job's node: it asks the controller nothing when it
    has nothing to stop, yet reports the end and submits the next job."""
    first = submit(slurm, ["sleep", "1"])
    second = submit(slurm, ["sleep", "1"])
    run = drive(
        slurm, lambda: (r := SlurmRun.objects.filter(job=first).first()) and r.started_seen and r
    )
    wait_until_logged(slurm, run)
    cli = CountingCli(conf=CONF, timeout=5)
    done = pass_.hook_pass(slurm.queue.pk, run.slurm_job_id, cli=cli, cycle=run_cycle)
    assert done["completed"] == 1 and done["submitted"] == 1
    assert done["reported"] == [run.slurm_job_id]  # its node's other epilogs need not call
    assert cli.listings == 0
    assert Job.objects.get(pk=first.pk).state == JobState.SUCCEEDED
    assert SlurmRun.objects.get(job=second).slurm_job_id is not None
    # A second hook for the same job finds its end reported: no second pass, and the
    # answer lists what the pass that reported it recorded.
    again = pass_.hook_pass(slurm.queue.pk, run.slurm_job_id, cli=cli, cycle=run_cycle)
    assert again["skipped"] and again["reported"] == [run.slurm_job_id]


def test_a_reclaim_decided_in_the_hooks_pass_signals_the_borrower_with_its_grace(
    slurm: Any,
) -> None:
    """The stop needs to know whether the borrower's job still runs (a signal and the grace
    period, rather than a cancel): the hook's pass lists the queue for it."""
    short, long = short_and_long_running(slurm)
    # The owners want their 4 instances of type B back; no pass runs until the hook's.
    owner = submit(slurm, ["sleep", "1"], owner=True, type_=TYPE_B, count=4)
    ended = SlurmRun.objects.get(job=short)
    wait_until_logged(slurm, ended)
    cli = CountingCli(conf=CONF, timeout=5)
    done = pass_.hook_pass(slurm.queue.pk, ended.slurm_job_id, cli=cli, cycle=run_cycle)
    assert done["completed"] == 1
    assert Job.objects.get(pk=long.pk).state == JobState.PENDING  # preempted by the reclaim
    stopping = SlurmRun.objects.get(job=long, run=1)
    assert stopping.state == SlurmRunState.STOPPING
    assert stopping.signalled_at is not None and stopping.retry_at is not None
    # Signalled with the queue's grace period (1 s), not cancelled outright.
    assert (stopping.retry_at - stopping.signalled_at).total_seconds() == pytest.approx(1.0)
    assert cli.listings == 1
    assert SlurmRun.objects.get(job=owner).slurm_job_id is not None


def nodes_may_go(queue_id: int, lock_class: int = pass_.NODES_CLASS) -> bool:
    """Seen from another connection, as a waiting hook sees it: whether no running pass
    holds back the nodes of the hooks whose jobs it reported (with ``pass_.LOCK_CLASS``:
    whether no pass of the queue runs)."""
    free: list[bool] = []

    def probe() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock_shared(%s, %s)", [lock_class, queue_id])
                got = bool(cursor.fetchone()[0])
                if got:
                    cursor.execute(
                        "SELECT pg_advisory_unlock_shared(%s, %s)", [lock_class, queue_id]
                    )
                free.append(got)
        finally:
            connection.close()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(timeout=10)
    return free[0]


def test_other_hooks_go_once_a_hooks_pass_committed_and_after_a_regular_pass_submits(
    slurm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hooks whose jobs a pass reported release their nodes once a hook's pass has
    committed its reports (with its cycle) and before it submits: it holds its own node
    until it has submitted, and one epilog ending starts all it submitted. A regular pass
    holds no node, so they wait for its submissions."""
    first = submit(slurm, ["sleep", "1"])
    submit(slurm, ["sleep", "1"])
    run = drive(
        slurm, lambda: (r := SlurmRun.objects.filter(job=first).first()) and r.started_seen and r
    )
    wait_until_logged(slurm, run)
    seen: list[tuple[str, bool]] = []
    write, send = orders.SlurmOrders.write, orders.submit_runs

    def cycle_seen(plan: Any, loaded: Any, decisions: Any) -> None:
        seen.append(("cycle", nodes_may_go(slurm.queue.pk)))
        write(plan, loaded, decisions)

    def submissions_seen(*args: Any) -> None:
        seen.append(("submitting", nodes_may_go(slurm.queue.pk)))
        send(*args)
        seen.append(("submitted", nodes_may_go(slurm.queue.pk)))

    monkeypatch.setattr(orders.SlurmOrders, "write", cycle_seen)
    monkeypatch.setattr(orders, "submit_runs", submissions_seen)
    done = pass_.hook_pass(slurm.queue.pk, run.slurm_job_id, cli=slurm.cli, cycle=run_cycle)
    assert done["completed"] == 1 and done["submitted"] == 1
    assert seen == [("cycle", False), ("submitting", True), ("submitted", True)]
    seen.clear()
    pass_.sync_queue(slurm.queue.pk, cli=slurm.cli, cycle=run_cycle)
    assert seen == [("cycle", False), ("submitting", False), ("submitted", False)]
    assert nodes_may_go(slurm.queue.pk)


def test_the_hooks_pass_stops_a_job_cancelled_in_the_product_before_it_read_slurm(
    slurm: Any,
) -> None:
    """A run over in the product whose Slurm job still runs is stopped by the next pass,
    a hook's pass too."""
    short, long = short_and_long_running(slurm)
    job_services.job_cancel(actor=slurm.borrower_user, job=long)
    ended = SlurmRun.objects.get(job=short)
    wait_until_logged(slurm, ended)
    done = pass_.hook_pass(slurm.queue.pk, ended.slurm_job_id, cli=slurm.cli, cycle=run_cycle)
    assert done["completed"] == 1
    stopping = SlurmRun.objects.get(job=long, run=1)
    assert stopping.state == SlurmRunState.STOPPING and stopping.signalled_at is not None


def test_the_hook_is_answered_once_slurm_has_the_next_job_and_the_pass_ends_after(
    slurm: Any,
) -> None:
    """The epilog waits for the hook's answer, and its node for the epilog: the answer
    comes once the next job is in Slurm, and the pass records what sbatch answered (and
    lets go of the queue) once the answer is out."""
    first = submit(slurm, ["sleep", "1"])
    second = submit(slurm, ["sleep", "1"])
    run = drive(
        slurm, lambda: (r := SlurmRun.objects.filter(job=first).first()) and r.started_seen and r
    )
    wait_until_logged(slurm, run)
    rest: list[Any] = []
    answer = slurm_services.slurm_job_ended(slurm_job_id=run.slurm_job_id, defer=rest.append)
    done = answer["executor_pass"]
    assert done["completed"] == 1 and done["submitted"] == 1
    next_run = SlurmRun.objects.get(job=second)
    assert next_run.name in {str(j["name"]) for j in slurm.cli.jobs()}  # Slurm has it
    assert next_run.slurm_job_id is None  # not recorded yet
    assert not nodes_may_go(slurm.queue.pk, pass_.LOCK_CLASS)  # the pass still runs
    assert len(rest) == 1
    rest[0]()
    assert SlurmRun.objects.get(job=second).slurm_job_id is not None
    assert nodes_may_go(slurm.queue.pk, pass_.LOCK_CLASS)


def test_a_regular_pass_that_read_slurm_before_a_hooks_pass_reports_nothing_twice(
    slurm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regular pass reads Slurm before it takes the queue's lock; a hook's pass that
    reports the end and submits the next job in between leaves it nothing to do again:
    the end is reported once, and the run submitted since (which the regular pass's
    reading of Slurm predates) is not taken for lost."""
    first = submit(slurm, ["sleep", "1"])
    second = submit(slurm, ["sleep", "30"])
    run = drive(
        slurm, lambda: (r := SlurmRun.objects.filter(job=first).first()) and r.started_seen and r
    )
    wait_until_logged(slurm, run)
    read = slurm_read.read_slurm

    def then_the_hook(*args: Any, **kwargs: Any) -> Any:
        seen = read(*args, **kwargs)
        monkeypatch.setattr(slurm_read, "read_slurm", read)  # the hook's pass reads as usual
        pass_.hook_pass(slurm.queue.pk, run.slurm_job_id, cli=slurm.cli, cycle=run_cycle)
        return seen

    monkeypatch.setattr(slurm_read, "read_slurm", then_the_hook)
    result = pass_.sync_queue(slurm.queue.pk, cli=slurm.cli, cycle=run_cycle)
    assert result.completed == 0 and result.lost == 0 and not result.skipped
    assert Job.objects.get(pk=first.pk).state == JobState.SUCCEEDED
    assert JobEvent.objects.filter(job=first, type="completed").count() == 1
    assert Job.objects.get(pk=second.pk).state == JobState.RUNNING
    next_run = SlurmRun.objects.get(job=second, run=1)
    assert next_run.state != SlurmRunState.ENDED and next_run.slurm_job_id is not None
