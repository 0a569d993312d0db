"""Priority exception rules, through the services."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, ExceptionState, JobEvent, JobState
from governance.models import PriorityException as PE
from governance.services import exceptions as svc
from governance.services import jobs as job_svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.factories import make_job, make_lead, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def w() -> Any:
    world = make_world()
    world.job = make_job(world.red_share, world.red_member, priority=10)
    return world


def file(w: Any, actor: Any = None, **fields: Any) -> PE:
    fields.setdefault("team", w.red)
    if "share" not in fields:
        fields.setdefault("job", w.job)
    fields.setdefault("priority", 2000)
    fields.setdefault("justification", "Release decision blocked on this run.")
    fields.setdefault("expires_at", timezone.now() + timedelta(days=3))
    return svc.exception_file(actor=actor or w.red_lead, **fields)


def assert_file_refused(w: Any, field: str, actor: Any = None, **fields: Any) -> list[str]:
    with pytest.raises(ValidationFailed) as exc_info:
        file(w, actor, **fields)
    assert field in exc_info.value.errors, exc_info.value.errors
    assert not PE.objects.exists()
    assert not AuditEntry.objects.exists()
    return exc_info.value.errors[field]


# --- filing -------------------------------------------------------------------------------


def test_file_job_exception_audited(w: Any) -> None:
    exc = file(w)
    assert exc.state == ExceptionState.PENDING
    assert exc.requester == w.red_lead
    entry = AuditEntry.objects.get()
    assert entry.event_type == AuditEvent.EXCEPTION_FILED
    assert entry.actor == w.red_lead
    assert entry.before is None
    assert entry.after["state"] == "pending"
    assert entry.after["priority"] == 2000
    assert entry.reason == "Release decision blocked on this run."
    assert (entry.team_id, entry.share_id, entry.job_id, entry.queue_id) == (
        w.red.pk,
        w.red_share.pk,
        w.job.pk,
        w.queue.pk,
    )
    w.job.refresh_from_db()
    assert w.job.priority == 10  # nothing changes before approval


def test_file_share_exception(w: Any) -> None:
    exc = file(w, share=w.red_share, job=None)
    assert exc.share == w.red_share and exc.job is None


@pytest.mark.parametrize("who", ["red_member", "blue_lead", "reviewer", "admin", "outsider"])
def test_only_leads_of_team_file(w: Any, who: str) -> None:
    with pytest.raises(PermissionDenied) as exc_info:
        file(w, getattr(w, who))
    assert "team" in exc_info.value.errors
    assert not PE.objects.exists()


def test_target_must_belong_to_team(w: Any) -> None:
    make_lead(w.blue, "red_lead")  # red_lead also leads blue
    assert_file_refused(w, "team", team=w.blue)
    assert_file_refused(w, "team", team=w.blue, share=w.red_share, job=None)


def test_exactly_one_target(w: Any) -> None:
    assert_file_refused(w, "job", share=w.red_share, job=w.job)
    assert_file_refused(w, "share", share=None, job=None)


def test_finished_job_refused(w: Any) -> None:
    w.job.state = JobState.SUCCEEDED
    w.job.save()
    assert_file_refused(w, "job")


@pytest.mark.parametrize("bad", [-1, 10000])
def test_priority_range(w: Any, bad: int) -> None:
    assert_file_refused(w, "priority", priority=bad)


@pytest.mark.parametrize("usable", [0, 300, 499])
def test_priority_already_usable_refused(w: Any, usable: int) -> None:
    messages = assert_file_refused(w, "priority", priority=usable)
    assert "499" in messages[0]


def test_justification_required(w: Any) -> None:
    assert_file_refused(w, "justification", justification="   ")


@pytest.mark.parametrize(
    "delta", [timedelta(seconds=-1), timedelta(0), timedelta(days=30, minutes=1)]
)
def test_expiry_future_and_within_30_days(w: Any, delta: timedelta) -> None:
    assert_file_refused(w, "expires_at", expires_at=timezone.now() + delta)


def test_expiry_at_29_days_ok(w: Any) -> None:
    assert file(w, expires_at=timezone.now() + timedelta(days=29, hours=23)).pk


# --- deciding -----------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["reviewer", "admin"])
def test_approve_job_exception_raises_priority(
    w: Any, who: str, django_capture_on_commit_callbacks: Any
) -> None:
    exc = file(w)
    with django_capture_on_commit_callbacks() as callbacks:
        svc.exception_approve(actor=getattr(w, who), exception=exc, note="ok for release")
    assert callbacks
    exc.refresh_from_db()
    assert exc.state == ExceptionState.APPROVED
    assert exc.decided_by == getattr(w, who)
    assert exc.decided_at is not None
    assert exc.decision_note == "ok for release"
    assert exc.previous_priority == 10
    w.job.refresh_from_db()
    assert w.job.priority == 2000
    approved = AuditEntry.objects.get(event_type=AuditEvent.EXCEPTION_APPROVED)
    assert approved.actor == getattr(w, who)
    assert approved.before["state"] == "pending"
    assert approved.after["state"] == "approved"
    assert approved.reason == "ok for release"
    raised = AuditEntry.objects.get(event_type=AuditEvent.JOB_REPRIORITISED)
    assert (raised.before, raised.after) == ({"priority": 10}, {"priority": 2000})
    assert JobEvent.objects.get(job=w.job, type="reprioritised")


def test_approve_share_exception_changes_no_job(w: Any) -> None:
    exc = file(w, share=w.red_share, job=None)
    svc.exception_approve(actor=w.reviewer, exception=exc)
    w.job.refresh_from_db()
    assert w.job.priority == 10
    assert not AuditEntry.objects.filter(event_type=AuditEvent.JOB_REPRIORITISED).exists()
    # ...but it now authorises submissions up to its priority.
    job = job_svc.job_submit(
        actor=w.red_member,
        share=w.red_share,
        name="urgent",
        priority=2000,
        preferences=[{"instance_type": "ml.g5.xlarge", "count": 1}],
    )
    assert job.priority == 2000


def test_reject(w: Any) -> None:
    exc = file(w)
    svc.exception_reject(actor=w.reviewer, exception=exc, note="not a release blocker")
    exc.refresh_from_db()
    assert exc.state == ExceptionState.REJECTED
    assert exc.decided_by == w.reviewer
    entry = AuditEntry.objects.get(event_type=AuditEvent.EXCEPTION_REJECTED)
    assert (entry.before["state"], entry.after["state"]) == ("pending", "rejected")
    assert entry.reason == "not a release blocker"
    w.job.refresh_from_db()
    assert w.job.priority == 10


@pytest.mark.parametrize("decide", [svc.exception_approve, svc.exception_reject])
@pytest.mark.parametrize("who", ["red_lead", "red_member", "blue_lead", "outsider"])
def test_only_reviewers_and_admins_decide(w: Any, decide: Any, who: str) -> None:
    exc = file(w)
    with pytest.raises(PermissionDenied):
        decide(actor=getattr(w, who), exception=exc)
    exc.refresh_from_db()
    assert exc.state == ExceptionState.PENDING


@pytest.mark.parametrize("decide", [svc.exception_approve, svc.exception_reject])
def test_nobody_decides_their_own(w: Any, decide: Any) -> None:
    from django.contrib.auth.models import Group

    w.red_lead.groups.add(Group.objects.get(name="reviewer"))
    exc = file(w)
    with pytest.raises(PermissionDenied) as exc_info:
        decide(actor=w.red_lead, exception=exc)
    assert "someone else" in exc_info.value.errors["detail"][0]
    exc.refresh_from_db()
    assert exc.state == ExceptionState.PENDING


@pytest.mark.parametrize("decide", [svc.exception_approve, svc.exception_reject])
@pytest.mark.parametrize(
    "state", [ExceptionState.APPROVED, ExceptionState.REJECTED, ExceptionState.WITHDRAWN]
)
def test_deciding_non_pending_refused_naming_state(w: Any, decide: Any, state: str) -> None:
    exc = file(w)
    PE.objects.filter(pk=exc.pk).update(state=state)
    with pytest.raises(ValidationFailed) as exc_info:
        decide(actor=w.admin, exception=exc)
    assert "state" in exc_info.value.errors


@pytest.mark.parametrize("decide", [svc.exception_approve, svc.exception_reject])
def test_deciding_expired_pending_refused_naming_state(w: Any, decide: Any) -> None:
    exc = file(w)
    PE.objects.filter(pk=exc.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(ValidationFailed) as exc_info:
        decide(actor=w.admin, exception=exc)
    assert "state" in exc_info.value.errors
    w.job.refresh_from_db()
    assert w.job.priority == 10


# --- a job that ends before the decision --------------------------------------------------


@pytest.mark.parametrize("decide", [svc.exception_approve, svc.exception_reject])
def test_deciding_for_an_ended_job_closes_it_as_moot(w: Any, decide: Any) -> None:
    exc = file(w)
    job_svc.job_cancel(actor=w.red_member, job=w.job, reason="not needed")
    with pytest.raises(ValidationFailed) as exc_info:
        decide(actor=w.reviewer, exception=exc, note="looks fine")
    message = exc_info.value.errors["state"][0]
    assert "has ended (cancelled)" in message and "neither approved nor rejected" in message
    exc.refresh_from_db()
    # Truthful: closed by the system, not decided by the reviewer.
    assert exc.state == ExceptionState.CLOSED
    assert exc.decided_by is None and exc.decision_note == ""
    entry = AuditEntry.objects.get(event_type=AuditEvent.EXCEPTION_CLOSED)
    assert entry.actor is None
    assert (entry.before["state"], entry.after["state"]) == ("pending", "closed")
    assert f"job {w.job.pk} ended (cancelled)" in entry.reason
    assert entry.job_id == w.job.pk
    assert not AuditEntry.objects.filter(
        event_type__in=(AuditEvent.EXCEPTION_APPROVED, AuditEvent.EXCEPTION_REJECTED)
    ).exists()
    # Closed is final: nobody decides or withdraws it afterwards.
    with pytest.raises(ValidationFailed):
        svc.exception_approve(actor=w.reviewer, exception=exc)
    with pytest.raises(ValidationFailed):
        svc.exception_withdraw(actor=w.red_lead, exception=exc)


def test_periodic_pass_closes_pending_exceptions_of_ended_jobs(w: Any) -> None:
    moot = file(w)
    other = make_job(w.red_share, w.red_member, priority=10)
    still_open = file(w, job=other)
    share_wide = file(w, share=w.red_share, job=None)
    assert svc.exception_close_moot() == 0  # every job still active
    job_svc.job_cancel(actor=w.red_member, job=w.job)
    assert svc.exception_close_moot() == 1
    assert svc.exception_close_moot() == 0  # idempotent
    states = dict(PE.objects.values_list("pk", "state"))
    assert states == {
        moot.pk: ExceptionState.CLOSED,
        still_open.pk: ExceptionState.PENDING,
        share_wide.pk: ExceptionState.PENDING,
    }
    assert AuditEntry.objects.filter(event_type=AuditEvent.EXCEPTION_CLOSED).count() == 1


def test_an_approved_exception_is_not_closed_when_its_job_ends(w: Any) -> None:
    exc = file(w)
    svc.exception_approve(actor=w.reviewer, exception=exc)
    job_svc.job_cancel(actor=w.red_member, job=w.job)
    assert svc.exception_close_moot() == 0
    exc.refresh_from_db()
    assert exc.state == ExceptionState.APPROVED  # decided; it expires as before


# --- withdrawing --------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["red_lead", "admin"])
def test_withdraw_pending(w: Any, who: str) -> None:
    exc = file(w)
    svc.exception_withdraw(actor=getattr(w, who), exception=exc, note="no longer needed")
    exc.refresh_from_db()
    assert exc.state == ExceptionState.WITHDRAWN
    entry = AuditEntry.objects.get(event_type=AuditEvent.EXCEPTION_WITHDRAWN)
    assert entry.actor == getattr(w, who)
    assert (entry.before["state"], entry.after["state"]) == ("pending", "withdrawn")
    assert entry.reason == "no longer needed"


def test_withdraw_approved_reverts_job(w: Any) -> None:
    exc = file(w)
    svc.exception_approve(actor=w.reviewer, exception=exc)
    svc.exception_withdraw(actor=w.red_lead, exception=exc, note="done")
    w.job.refresh_from_db()
    assert w.job.priority == 10
    reverted = AuditEntry.objects.filter(event_type=AuditEvent.JOB_REPRIORITISED).order_by("id")
    assert [e.after for e in reverted] == [{"priority": 2000}, {"priority": 10}]
    assert reverted.last().actor == w.red_lead  # type: ignore[union-attr]


@pytest.mark.parametrize("who", ["red_member", "blue_lead", "reviewer", "outsider"])
def test_only_requester_or_admin_withdraws(w: Any, who: str) -> None:
    exc = file(w)
    with pytest.raises(PermissionDenied):
        svc.exception_withdraw(actor=getattr(w, who), exception=exc)
    exc.refresh_from_db()
    assert exc.state == ExceptionState.PENDING


def test_another_lead_of_same_team_may_not_withdraw(w: Any) -> None:
    exc = file(w)
    with pytest.raises(PermissionDenied):
        svc.exception_withdraw(actor=make_lead(w.red, "red_lead2"), exception=exc)


@pytest.mark.parametrize(
    "state", [ExceptionState.REJECTED, ExceptionState.WITHDRAWN, ExceptionState.EXPIRED]
)
def test_withdraw_closed_refused_naming_state(w: Any, state: str) -> None:
    exc = file(w)
    PE.objects.filter(pk=exc.pk).update(state=state)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.exception_withdraw(actor=w.red_lead, exception=exc)
    assert "state" in exc_info.value.errors


# --- expiry -------------------------------------------------------------------------------


def test_expire_due_reverts_job_and_audits(w: Any) -> None:
    exc = file(w)
    svc.exception_approve(actor=w.reviewer, exception=exc)
    assert svc.exception_expire_due(now=exc.expires_at - timedelta(seconds=1)) == 0
    assert svc.exception_expire_due(now=exc.expires_at) == 1
    exc.refresh_from_db()
    assert exc.state == ExceptionState.EXPIRED
    w.job.refresh_from_db()
    assert w.job.priority == 10
    entry = AuditEntry.objects.get(event_type=AuditEvent.EXCEPTION_EXPIRED)
    assert entry.actor is None
    assert (entry.before["state"], entry.after["state"]) == ("approved", "expired")
    revert = (
        AuditEntry.objects.filter(event_type=AuditEvent.JOB_REPRIORITISED).order_by("id").last()
    )
    assert revert is not None and revert.actor is None and revert.after == {"priority": 10}
    assert svc.exception_expire_due(now=exc.expires_at) == 0  # idempotent


def test_expiry_keeps_a_priority_changed_since(w: Any) -> None:
    exc = file(w)
    svc.exception_approve(actor=w.reviewer, exception=exc)
    job_svc.job_reprioritise(actor=w.admin, job=w.job, priority=700)
    svc.exception_expire_due(now=exc.expires_at + timedelta(seconds=1))
    w.job.refresh_from_db()
    assert w.job.priority == 700


def test_pending_past_expiry_expires(w: Any) -> None:
    exc = file(w)
    svc.exception_expire_due(now=exc.expires_at)
    exc.refresh_from_db()
    assert exc.state == ExceptionState.EXPIRED
    w.job.refresh_from_db()
    assert w.job.priority == 10
    entry = AuditEntry.objects.get(event_type=AuditEvent.EXCEPTION_EXPIRED)
    assert (entry.before["state"], entry.after["state"]) == ("pending", "expired")


def test_expired_share_exception_no_longer_covers(w: Any) -> None:
    exc = file(w, share=w.red_share, job=None)
    svc.exception_approve(actor=w.reviewer, exception=exc)
    PE.objects.filter(pk=exc.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    svc.exception_expire_due()
    with pytest.raises(ValidationFailed) as exc_info:
        job_svc.job_reprioritise(actor=w.red_member, job=w.job, priority=2000)
    assert "priority" in exc_info.value.errors
