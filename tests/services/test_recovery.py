"""Recovery verification (docs/workloads.md): a run that resumed after a preemption and
completed with its output confirmed valid verifies its workload; a resumed run that fails
or whose output is invalid sets it failed; each change is audited, kept in the history
with the job as evidence and told to the team's leads. A run never preempted changes
nothing."""

from __future__ import annotations

import pytest
from django.utils import timezone

from governance.models import (
    AuditEntry,
    AuditEvent,
    JobState,
    Notification,
    RecoveryChange,
    RecoveryStatus,
    Workload,
)
from governance.services import runs
from governance.services import workloads as svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_world()


@pytest.fixture
def workload(world):
    return Workload.objects.create(team=world.red, name="vision/detector-finetune")


def running(world, workload, *, preemptions=1, **fields):
    return make_job(
        world.red_share,
        world.red_member,
        state=JobState.RUNNING,
        run=preemptions + 1,
        preemptions=preemptions,
        workload=workload,
        started_at=timezone.now(),
        **fields,
    )


def complete(job, output_valid):
    return runs.run_complete(
        actor=None, job_id=job.pk, run=job.run, now=timezone.now(), output_valid=output_valid
    )


def test_a_resumed_run_reported_valid_verifies_its_workload(world, workload):
    job = running(world, workload)
    complete(job, True)
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.VERIFIED
    [change] = RecoveryChange.objects.filter(workload=workload)
    assert (change.before, change.after, change.evidence_job_id) == (
        "unverified",
        "verified",
        job.pk,
    )
    entry = AuditEntry.objects.get(event_type=AuditEvent.WORKLOAD_RECOVERY_CHANGED)
    assert entry.job_id == job.pk
    assert entry.before["recovery_status"] == "unverified"
    assert entry.after["recovery_status"] == "verified"
    told = Notification.objects.filter(kind="recovery_changed")
    assert {n.recipient_id for n in told} == {world.red_lead.pk}
    assert f"/workloads/{workload.pk}/" == told[0].url


def test_a_resumed_run_reported_invalid_or_failing_sets_failed(world, workload):
    complete(running(world, workload), False)
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.FAILED
    workload.recovery_status = RecoveryStatus.VERIFIED
    workload.save()
    job = running(world, workload)
    runs.run_fail(actor=None, job_id=job.pk, run=job.run, now=timezone.now(), message="NaN loss")
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.FAILED
    latest = RecoveryChange.objects.filter(workload=workload).first()
    assert latest.evidence_job_id == job.pk
    assert "NaN loss" in latest.note


def test_runs_never_preempted_or_without_a_verdict_change_nothing(world, workload):
    complete(running(world, workload, preemptions=0), True)
    job = running(world, workload, preemptions=0)
    runs.run_fail(actor=None, job_id=job.pk, run=job.run, now=timezone.now(), message="x")
    complete(running(world, workload), None)
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.UNVERIFIED
    assert not RecoveryChange.objects.exists()
    assert not AuditEntry.objects.filter(event_type=AuditEvent.WORKLOAD_RECOVERY_CHANGED).exists()


def test_a_lead_confirms_or_rejects_a_resumed_runs_output(world, workload):
    job = running(world, workload)
    complete(job, None)
    svc.job_output_judge(actor=world.red_lead, job=job.pk, valid=True, note="eval matches")
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.VERIFIED
    judged = AuditEntry.objects.get(event_type=AuditEvent.JOB_OUTPUT_JUDGED)
    assert judged.actor == world.red_lead
    assert judged.after == {"output_valid": True, "workload": workload.pk}
    assert judged.reason == "eval matches"
    change = RecoveryChange.objects.get()
    assert (change.actor, change.evidence_job_id, change.note) == (
        world.red_lead,
        job.pk,
        "eval matches",
    )
    # the lead is not told of their own change
    assert not Notification.objects.filter(kind="recovery_changed").exists()
    svc.job_output_judge(actor=world.admin, job=job.pk, valid=False)
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.FAILED
    assert Notification.objects.filter(kind="recovery_changed", recipient=world.red_lead).exists()


def test_who_may_judge_and_what(world, workload):
    job = running(world, workload)
    complete(job, None)
    for actor in (world.red_member, world.blue_lead, world.reviewer):
        with pytest.raises(PermissionDenied) as exc:
            svc.job_output_judge(actor=actor, job=job.pk, valid=True)
        assert "valid" in exc.value.errors
    with pytest.raises(ValidationFailed) as exc:
        svc.job_output_judge(actor=world.red_lead, job=job.pk, valid="yes", note="x" * 3000)
    assert set(exc.value.errors) == {"valid", "note"}
    fresh = running(world, workload, preemptions=0)
    complete(fresh, None)
    with pytest.raises(ValidationFailed) as exc:
        svc.job_output_judge(actor=world.red_lead, job=fresh.pk, valid=True)
    assert "never preempted" in exc.value.errors["state"][0]
    still_running = running(world, None)
    with pytest.raises(ValidationFailed) as exc:
        svc.job_output_judge(actor=world.red_lead, job=still_running.pk, valid=True)
    assert set(exc.value.errors) == {"state", "workload"}
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.UNVERIFIED
