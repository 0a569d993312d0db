"""Runs written in batches: reported by the executor (``runs_complete``,
``runs_started``), the same job states, timeline events and audit entries as the
one-by-one services, and a run that is no longer its job's running run is left out;
admitted by the cycle (``runs_admit``), each job with its own start."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, Job, JobEvent, JobState
from governance.models.capacity import Executor
from governance.services import runs
from scheduler.cycle.run import run_cycle
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
    run_cycle(queue.pk, now=t0)
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


def test_one_cycle_admits_unlike_jobs_each_with_its_own_start() -> None:
    """The cycle writes its admissions in one batch (``runs_admit``): jobs that start
    alike share a statement, yet each keeps its own type, preference, borrowed count, run
    and first start, with one timeline event and one audit entry."""
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    big = "ml.g5.12xlarge"
    queue = make_queue("mixed", {G5: 2, big: 2})
    lender = make_share(queue, TeamFactory(name="l"), "lender", {G5: 1, big: 2}, policy="LEND")
    borrower = make_share(
        queue,
        TeamFactory(name="b"),
        "borrower",
        {G5: 1, big: 0},
        policy="LEND_AND_BORROW",
        borrow_limit=-1,
    )
    user = UserFactory(username="u")
    own = make_job(borrower, user, name="own", submitted_at=t0)
    borrowing = make_job(borrower, user, name="borrowing", submitted_at=t0)
    # Its first choice (3 of G5) never fits: it starts on its second, borrowing both.
    fallback = make_job(
        borrower,
        user,
        name="fallback",
        submitted_at=t0,
        preferences=[{"instance_type": G5, "count": 3}, {"instance_type": big, "count": 2}],
    )
    earlier = t0 - timedelta(minutes=5)
    Job.objects.filter(pk=own.pk).update(run=2, started_at=earlier)  # admitted before
    assert lender.pk and run_cycle(queue.pk, now=t0).admitted == 3
    got = {
        j.name: (j.instance_type.name, j.preference, j.borrowed, j.run, j.started_at)
        for j in Job.objects.filter(queue=queue).select_related("instance_type")
    }
    assert got == {
        "own": (G5, 0, 0, 3, earlier),
        "borrowing": (G5, 0, 1, 1, t0),
        "fallback": (big, 1, 2, 1, t0),
    }
    for job in (own, borrowing, fallback):
        events, entries = trail(job)
        assert [t for t, _ in events] == ["admitted"]
        assert events[0][1]["run"] == got[job.name][3]
        assert [e[0] for e in entries] == [AuditEvent.JOB_ADMITTED]
        assert entries[0][2]["borrowed"] == got[job.name][2]
        assert entries[0][2]["instance_type"] == got[job.name][0]


def test_a_batch_records_when_each_run_finished_in_the_order_given(w: Any) -> None:
    """The simulated fleet reports the runs it finished since the last cycle, each at its
    own time, in the order they finished: the jobs, their timelines and the audit trail
    say so."""
    one, two, three, _ = w.jobs
    first, second = w.t0 + timedelta(seconds=20), w.t0 + timedelta(seconds=45)
    done = runs.runs_complete(
        done=[(three.pk, 1), (one.pk, 1)],
        now=w.t0 + timedelta(minutes=1),
        finished={three.pk: first, one.pk: second},
    )
    assert [j.pk for j in done] == [three.pk, one.pk]
    one.refresh_from_db()
    three.refresh_from_db()
    assert (three.finished_at, one.finished_at) == (first, second)
    assert JobEvent.objects.get(job=three, type="completed").at == first
    assert JobEvent.objects.get(job=one, type="completed").at == second
    entries = AuditEntry.objects.filter(event_type=AuditEvent.JOB_COMPLETED).order_by("id")
    assert [(e.job_id, e.created_at) for e in entries] == [(three.pk, first), (one.pk, second)]
    two.refresh_from_db()
    assert two.state == JobState.RUNNING
