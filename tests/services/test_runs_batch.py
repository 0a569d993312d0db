"""Runs reported by the executor in batches (``runs_complete``, ``runs_started``): the
same job states, timeline events and audit entries as the one-by-one services, and a run
that is no longer its job's running run is left out."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, Job, JobEvent, JobState
from governance.models.capacity import Executor
from governance.services import runs
from scheduler import bridge
from tests.factories import TeamFactory, UserFactory, make_job, make_queue, make_share

pytestmark = pytest.mark.django_db
G5 = "ml.g5.xlarge"


@pytest.fixture
def w() -> Any:
    """A Slurm queue of four instances with four one-instance jobs admitted at t0."""
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    queue = make_queue("slurm", {G5: 4})
    queue.executor = Executor.SLURM
    queue.save()
    share = make_share(queue, TeamFactory(name="t"), "s", {G5: 4})
    user = UserFactory(username="u")
    jobs = [make_job(share, user, name=f"j{i}", duration=600, submitted_at=t0) for i in range(4)]
    bridge.run_cycle(queue.pk, now=t0)
    assert all(j.state == JobState.RUNNING for j in Job.objects.filter(queue=queue))
    return SimpleNamespace(t0=t0, queue=queue, jobs=jobs)


def trail(job: Job) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, Any, Any]]]:
    events = [(e.type, e.data) for e in JobEvent.objects.filter(job=job).order_by("id")]
    entries = [
        (e.event_type, e.before, e.after)
        for e in AuditEntry.objects.filter(job_id=job.pk).order_by("id")
    ]
    return events, entries


def test_a_batch_of_completions_writes_what_one_by_one_completions_write(w: Any) -> None:
    one, two, three, four = w.jobs
    at = w.t0 + timedelta(seconds=30)
    runs.run_complete(actor=None, job_id=one.pk, run=1, now=at)
    done = runs.runs_complete(done=[(two.pk, 1), (three.pk, 1)], now=at)
    assert sorted(j.pk for j in done) == [two.pk, three.pk]
    for job in (one, two, three):
        job.refresh_from_db()
        assert job.state == JobState.SUCCEEDED and job.finished_at == at
        assert job.work_done == 600 and job.checkpoint_work == 600
    single, batched = trail(one), trail(two)
    assert [t for t, _ in batched[0]] == [t for t, _ in single[0]]
    assert batched[0][-1] == ("completed", {"run": 1})
    assert [e[0] for e in batched[1]] == [e[0] for e in single[1]]
    assert batched[1][-1][0] == AuditEvent.JOB_COMPLETED
    assert batched[1][-1][1]["state"] == "RUNNING" and batched[1][-1][2]["state"] == "SUCCEEDED"
    four.refresh_from_db()
    assert four.state == JobState.RUNNING


def test_a_batch_leaves_out_runs_that_are_over(w: Any) -> None:
    one, two = w.jobs[:2]
    at = w.t0 + timedelta(seconds=30)
    runs.run_complete(actor=None, job_id=one.pk, run=1, now=at)
    before = AuditEntry.objects.count()
    done = runs.runs_complete(done=[(one.pk, 1), (two.pk, 7), (10**12, 1)], now=at)
    assert done == []
    assert AuditEntry.objects.count() == before
    two.refresh_from_db()
    assert two.state == JobState.RUNNING


def test_a_batch_of_starts_writes_what_one_by_one_start_reports_write(w: Any) -> None:
    one, two, three, _ = w.jobs
    at = w.t0 + timedelta(seconds=5)
    runs.run_report(actor=None, job_id=one.pk, run=1, kind="started", now=at)
    reported = runs.runs_started(started=[(two.pk, 1), (three.pk, 2)], now=at)
    assert [j.pk for j in reported] == [two.pk]
    single, batched = trail(one), trail(two)
    assert batched[0][-1] == single[0][-1] == ("started", {"run": 1})
    assert batched[1][-1] == single[1][-1]
    assert batched[1][-1][0] == AuditEvent.JOB_STARTED
    two.refresh_from_db()
    assert two.progress_at == at and two.last_heartbeat_at == at
    three.refresh_from_db()
    assert three.progress_at is None
    assert JobEvent.objects.filter(job=three, type="started").count() == 0
