"""Rules written once (issue: one copy of each rule), checked where they used to differ.

- Lost work of a run the product does not execute follows docs/scheduling.md "Work and lost work":
  the latest progress the executor reported plus the time since, minus the checkpoint,
  never below 0 (it used to be wall-clock time since admission minus the checkpoint,
  which went negative when an agent worked faster than the clock).
- Whether a type is accelerated (and so whether max pending time applies) is the stored
  flag, never the type's name.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, InstanceType, Job, JobEvent, JobState
from governance.models.capacity import Executor
from governance.services import runs
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, UserFactory, make_job, make_queue, make_share

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


def at(t0: datetime, seconds: float) -> datetime:
    return t0 + timedelta(seconds=seconds)


@pytest.fixture
def w() -> Any:
    """An agent queue of one instance; a low-priority job of a share with in-share
    preemption runs on it, claimed by agent a1 at t0."""
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    queue = make_queue("agents", {G5: 1})
    queue.executor = Executor.AGENT
    queue.save()
    share = make_share(queue, TeamFactory(name="t"), "s", {G5: 1}, in_share_preemption=True)
    user = UserFactory(username="u")
    low = make_job(share, user, name="low", priority=1, duration=1000, submitted_at=t0)
    run_cycle(queue.pk, now=t0)
    runs.run_claim(actor=user, queue_id=queue.pk, agent="a1", now=t0, limit=1, start=True)
    return SimpleNamespace(t0=t0, queue=queue, share=share, user=user, low=low)


def preempt_at(w: Any, seconds: float) -> JobEvent:
    """A higher-priority job arrives and its cycle at ``seconds`` preempts ``low``."""
    make_job(w.share, w.user, name="high", priority=5, submitted_at=at(w.t0, seconds))
    run_cycle(w.queue.pk, now=at(w.t0, seconds))
    return JobEvent.objects.get(job=w.low, type="preempted")


def report(w: Any, kind: str, seconds: float, progress: float | None) -> None:
    runs.run_report(
        actor=w.user, job_id=w.low.pk, run=1, kind=kind, now=at(w.t0, seconds), work=progress
    )


def test_progress_faster_than_the_clock_loses_only_the_work_since_the_checkpoint(w: Any) -> None:
    report(w, "checkpoint", 6.5, 30)  # 30 work units after 6.5 s: a fast agent
    event = preempt_at(w, 7)
    # Work at 7 s: 30 + 0.5 s x speed 1 = 30.5; checkpoint 30; lost 0.5 (was -23.5).
    assert event.data["lost_work"] == pytest.approx(0.5)
    entry = AuditEntry.objects.get(event_type=AuditEvent.JOB_PREEMPTED, job_id=w.low.pk)
    assert entry.after["lost_work"] == pytest.approx(0.5)
    low = Job.objects.get(pk=w.low.pk)
    assert (low.state, low.checkpoint_work, low.work_done) == (JobState.PENDING, 30, 30)
    assert low.recomputed == pytest.approx(0.5)


def test_progress_reported_after_the_checkpoint_is_lost_with_the_time_since(w: Any) -> None:
    report(w, "checkpoint", 10, 12)
    report(w, "heartbeat", 20, 40)  # progress 40, not checkpointed
    event = preempt_at(w, 25)  # 40 + 5 - 12
    assert event.data["lost_work"] == pytest.approx(33)


@pytest.mark.parametrize(("progress", "seconds"), [(30, 30), (5, 31), (0, 30)])
def test_lost_work_is_never_negative(w: Any, progress: float, seconds: float) -> None:
    report(w, "checkpoint", 30, 30)
    report(w, "heartbeat", 30, progress)  # a progress report below the checkpoint
    event = preempt_at(w, seconds)
    assert event.data["lost_work"] >= 0
    assert Job.objects.get(pk=w.low.pk).recomputed >= 0


def test_a_run_declared_lost_uses_the_same_arithmetic(w: Any) -> None:
    report(w, "checkpoint", 6.5, 30)
    job = runs.run_declare_lost(job_id=w.low.pk, now=at(w.t0, 8), explanation="silent")
    assert job is not None
    event = JobEvent.objects.get(job=w.low, type="lost")
    assert event.data["lost_work"] == pytest.approx(1.5)


def _waiting_job(type_name: str, *, accelerated: bool) -> tuple[Job, datetime]:
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    queue = make_queue(f"q-{type_name}", {type_name: 0})
    InstanceType.objects.filter(name=type_name).update(accelerated=accelerated)
    share = make_share(queue, TeamFactory(name=f"t-{type_name}"), "s", {type_name: 1})
    job = make_job(
        share,
        UserFactory(username=f"u-{type_name}"),
        preferences=[{"instance_type": type_name, "count": 1}],
        max_pending=10,
        submitted_at=t0,
    )
    run_cycle(queue.pk, now=t0)
    run_cycle(queue.pk, now=at(t0, 20))
    job.refresh_from_db()
    return job, t0


def test_a_type_stored_as_not_accelerated_never_times_jobs_out() -> None:
    # Its name says GPU family (ml.g5); the stored flag says not accelerated: it decides.
    job, _ = _waiting_job("ml.g5.xlarge", accelerated=False)
    assert job.state == JobState.PENDING


def test_a_type_stored_as_accelerated_times_jobs_out_whatever_its_name() -> None:
    # ``ml.gr6.4xlarge`` is no accelerated family by name; stored as accelerated.
    job, t0 = _waiting_job("ml.gr6.4xlarge", accelerated=True)
    assert job.state == JobState.TIMED_OUT
    assert job.finished_at == at(t0, 20)
