"""The completion hooks of one wave of ending jobs wait for the pass that reports them:
each returns, without a pass of its own, as soon as that pass lets its node go (a hook's
pass once its reports are committed, a regular pass once its submissions are sent), and a
hook gives up (its node released, the next poll doing the work) when passes run longer
than SLURM_HOOK_WAIT_SECONDS. No Slurm is needed: the pass here is a test holding the
queue's locks, as a running pass does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from governance.models import SlurmRun, SlurmRunState
from governance.models.capacity import Executor
from scheduler.cycle.run import run_cycle
from scheduler.executors.slurm import pass_
from tests.factories import TeamFactory, UserFactory, make_job, make_queue, make_share

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running(settings: Any) -> SlurmRun:
    """A run of a Slurm queue whose Slurm job (777) just ended, not reported yet."""
    settings.SLURM_HOOK_GATHER_SECONDS = 0
    settings.SLURM_BIN_DIR = "/nonexistent"  # a pass of its own finds no Slurm: it pauses
    queue = make_queue("slurm", {"ml.g5.xlarge": 2})
    queue.executor = Executor.SLURM
    queue.save()
    share = make_share(queue, TeamFactory(name="t"), "s", {"ml.g5.xlarge": 2})
    job = make_job(share, UserFactory(username="u"), state="RUNNING", run=1)
    return SlurmRun.objects.create(
        job=job, run=1, name="gov-1-r1", slurm_job_id=777, created_at=timezone.now()
    )


def hooks(queue_id: int, count: int) -> tuple[list[threading.Thread], list[dict[str, object]]]:
    answers: list[dict[str, object]] = []

    def call() -> None:
        try:
            answers.append(pass_.hook_pass(queue_id, 777, cycle=run_cycle))
        finally:
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads, answers


@contextmanager
def a_pass(queue_id: int) -> Iterator[Any]:
    """A pass of the queue runs (its lock and the lock it lets the hooks' nodes go by)."""
    with pass_.queue_lock(queue_id) as got:
        assert got
        releasing = pass_._Releasing(queue_id)
        try:
            yield releasing
        finally:
            releasing.release()


def test_hooks_return_once_the_pass_that_reported_their_job_lets_their_nodes_go(
    running: SlurmRun, settings: Any
) -> None:
    settings.SLURM_HOOK_WAIT_SECONDS = 30
    queue_id = running.job.queue_id
    with a_pass(queue_id) as releasing:
        threads, answers = hooks(queue_id, 4)
        for thread in threads:
            thread.join(timeout=0.5)
        assert all(thread.is_alive() for thread in threads)  # they wait for the pass
        # The pass reports the job's end and lets the nodes go; it still runs (a hook's
        # pass submits what runs next holding its own node), the hooks need not wait.
        SlurmRun.objects.filter(pk=running.pk).update(state=SlurmRunState.ENDED)
        releasing.release()
        for thread in threads:
            thread.join(timeout=10)
        assert not any(thread.is_alive() for thread in threads)
    assert [a["skipped"] for a in answers] == [
        "a pass reported the job's end and released its node"
    ] * 4
    assert all(a["completed"] == 0 and not a["paused"] for a in answers)


def test_a_hook_whose_job_is_reported_returns_at_once_when_no_pass_runs(
    running: SlurmRun,
) -> None:
    SlurmRun.objects.filter(pk=running.pk).update(state=SlurmRunState.ENDED)
    answer = pass_.hook_pass(running.job.queue_id, 777, cycle=run_cycle)
    assert answer["skipped"] == "an earlier pass reported the job's end"


def test_a_hook_gives_up_when_the_pass_runs_too_long(running: SlurmRun, settings: Any) -> None:
    settings.SLURM_HOOK_WAIT_SECONDS = 0.2
    queue_id = running.job.queue_id
    with a_pass(queue_id):
        threads, answers = hooks(queue_id, 2)
        for thread in threads:
            thread.join(timeout=10)
    assert [a["skipped"] for a in answers] == ["another pass of this queue ran too long"] * 2
    running.refresh_from_db()
    assert running.state != SlurmRunState.ENDED  # the next pass reports it


def test_a_hook_whose_job_is_still_unreported_runs_the_pass_itself(
    running: SlurmRun, settings: Any
) -> None:
    """The pass it waited for did not report its job (the job ended after that pass read
    Slurm): the hook waits for that pass to end, not only for its reports, then runs one
    (here it finds Slurm unreachable)."""
    settings.SLURM_HOOK_WAIT_SECONDS = 30
    queue_id = running.job.queue_id
    with a_pass(queue_id) as releasing:
        threads, answers = hooks(queue_id, 1)
        releasing.release()  # its reports are in, without this job
        threads[0].join(timeout=0.5)
        assert threads[0].is_alive()
    threads[0].join(timeout=30)
    assert answers and answers[0]["skipped"] == "" and answers[0]["paused"] is True
