"""Issue 13: every notification event, one by one, gives exactly one notification per
recipient, only once its change commits, and none when the change rolls back.

The events: an exception needs review, an exception was decided (approved or rejected),
a job was preempted or failed, a share of your team changed (created, updated or
deleted), an agreement reached its review date. For each, the same three checks:

- rolled back: the change raises after the event inside its transaction, so nothing is
  stored and no delivery is queued;
- committed: the expected people each have one notification; email leaves only from the
  delivery the commit queues for a worker (the task is run here as the worker would), one
  message per recipient whose kind is emailed by default;
- told again: announcing the same event a second time tells nobody twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from governance.models import (
    Job,
    JobState,
    Notification,
    NotificationKind,
    Policy,
    PriorityException,
    Share,
)
from governance.models.notifications import EMAIL_BY_DEFAULT
from governance.services import agreements, exceptions, notifications, runs, shares
from governance.tasks import deliver_notifications
from scheduler.cycle.run import run_cycle
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture
def w() -> Any:
    world = make_world()
    for user in (world.reviewer, world.admin, world.red_lead, world.red_member, world.blue_lead):
        user.email = f"{user.username}@example.org"
        user.save()
    return world


def _file(w: Any) -> Any:
    return exceptions.exception_file(
        actor=w.red_lead,
        team=w.red,
        share=w.red_share,
        priority=2000,
        justification="release blocked",
        expires_at=timezone.now() + timedelta(days=2),
    )


@dataclass
class Event:
    """``arrange`` builds the world before the change; ``act`` makes the change that tells
    people; ``again`` announces the same event once more."""

    kind: NotificationKind
    recipients: set[str]
    arrange: Callable[[Any], Any]
    act: Callable[[Any, Any], Any]
    again: Callable[[Any, Any], Any]


def _exception_filed() -> Event:
    return Event(
        NotificationKind.EXCEPTION_NEEDS_REVIEW,
        {"admin", "reviewer"},
        arrange=lambda w: None,
        act=lambda w, _: _file(w),
        again=lambda w, _: notifications.exception_filed(
            PriorityException.objects.get(), w.red_lead
        ),
    )


def _exception_decided(decision: str) -> Event:
    def act(w: Any, exc: Any) -> Any:
        decide = getattr(exceptions, f"exception_{decision}")
        return decide(actor=w.reviewer, exception=exc, note="decided")

    return Event(
        NotificationKind.EXCEPTION_DECIDED,
        {"red_lead"},  # the requester, and the team's leads: the same person here
        arrange=_file,
        act=act,
        again=lambda w, exc: notifications.exception_decided(
            type(exc).objects.get(pk=exc.pk), w.reviewer
        ),
    )


def _borrowing_world(w: Any) -> Any:
    """Blue borrows all four g5 while red lends; red's own job then reclaims one."""
    now = timezone.now()
    shares.share_update(
        actor=w.admin, share=w.red_share, version=w.red_share.version, changes={"policy": "LEND"}
    )
    shares.share_update(
        actor=w.admin,
        share=w.blue_share,
        version=w.blue_share.version,
        changes={"policy": Policy.LEND_AND_BORROW, "borrow_limit": -1},
    )
    borrower = make_job(
        Share.objects.get(pk=w.blue_share.pk),
        w.blue_lead,
        name="borrower",
        preferences=[{"instance_type": G5, "count": 4}],
        duration=3600,
        submitted_at=now,
    )
    run_cycle(w.queue.pk, now=now)
    make_job(w.red_share, w.red_member, name="owner", duration=60, submitted_at=now)
    return borrower


def _job_preempted() -> Event:
    def again(w: Any, borrower: Any) -> Any:
        job = Job.objects.get(pk=borrower.pk)
        notifications.job_stopped(job, failed=False, why="again", at=timezone.now())

    return Event(
        NotificationKind.JOB_PREEMPTED,
        {"blue_lead"},  # the submitter, and blue's leads: the same person here
        arrange=_borrowing_world,
        act=lambda w, _: run_cycle(w.queue.pk, now=timezone.now() + timedelta(seconds=1)),
        again=again,
    )


def _running_job(w: Any) -> Any:
    now = timezone.now()
    job = make_job(w.red_share, w.red_member, name="doomed", duration=3600, submitted_at=now)
    run_cycle(w.queue.pk, now=now)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    return job


def _job_failed() -> Event:
    def act(w: Any, job: Any) -> Any:
        return runs.run_fail(
            actor=None, job_id=job.pk, run=job.run, now=timezone.now(), message="out of memory"
        )

    def again(w: Any, job: Any) -> Any:
        failed = Job.objects.get(pk=job.pk)
        notifications.job_stopped(failed, failed=True, why="again", at=timezone.now())

    return Event(
        NotificationKind.JOB_FAILED,
        {"red_member", "red_lead"},  # the submitter and red's lead
        arrange=_running_job,
        act=act,
        again=again,
    )


def _share_changed() -> Event:
    def act(w: Any, _: Any) -> Any:
        share = Share.objects.get(pk=w.red_share.pk)
        return shares.share_update(
            actor=w.admin,
            share=share,
            version=share.version,
            changes={"limits": {G5: 3, "ml.p4d.24xlarge": 1}},
            reason="more for the launch",
        )

    def again(w: Any, _: Any) -> Any:
        notifications.share_changed(Share.objects.get(pk=w.red_share.pk), w.admin, "again")

    return Event(
        NotificationKind.SHARE_CHANGED,
        {"red_lead", "red_member"},  # red's people, not the admin who changed it
        arrange=lambda w: None,
        act=act,
        again=again,
    )


def _share_created() -> Event:
    def act(w: Any, _: Any) -> Any:
        return shares.share_create(
            actor=w.admin,
            queue=w.queue,
            team=w.red,
            name="red-extra",
            limits={"ml.p4d.24xlarge": 1},
            reason="a second share for red",
        )

    def again(w: Any, _: Any) -> Any:
        created = Share.objects.get(name="red-extra")
        notifications.share_changed(created, w.admin, "again", what="created")

    return Event(
        NotificationKind.SHARE_CHANGED,
        {"red_lead", "red_member"},
        arrange=lambda w: None,
        act=act,
        again=again,
    )


def _share_deleted() -> Event:
    def arrange(w: Any) -> Any:
        return shares.share_create(
            actor=w.admin, queue=w.queue, team=w.red, name="red-extra", limits={G5: 0}
        )

    def act(w: Any, share: Any) -> Any:
        return shares.share_delete(actor=w.admin, share=share.pk, reason="not needed")

    def again(w: Any, share: Any) -> Any:
        notifications.share_changed(share, w.admin, "again", what="deleted")

    return Event(
        NotificationKind.SHARE_CHANGED,
        {"red_lead", "red_member"},
        arrange=arrange,
        act=act,
        again=again,
    )


def _agreement_due() -> Event:
    def arrange(w: Any) -> Any:
        return agreements.agreement_create(
            actor=w.admin,
            title="Red's GPUs",
            owner=w.red_lead.username,
            editors=[w.red_member.username],
            review_by=timezone.localdate(),
        )

    return Event(
        NotificationKind.AGREEMENT_REVIEW_DUE,
        {"red_lead", "red_member", "reviewer", "admin"},  # owner, editors, reviewers
        arrange=arrange,
        act=lambda w, _: notifications.agreements_due(),
        again=lambda w, _: notifications.agreements_due(),
    )


EVENTS = {
    "exception needs review": _exception_filed,
    "exception approved": lambda: _exception_decided("approve"),
    "exception rejected": lambda: _exception_decided("reject"),
    "job preempted": _job_preempted,
    "job failed": _job_failed,
    "share changed": _share_changed,
    "share created": _share_created,
    "share deleted": _share_deleted,
    "agreement review due": _agreement_due,
}


def _told(kind: NotificationKind) -> list[str]:
    rows = Notification.objects.filter(kind=kind).select_related("recipient")
    return sorted(n.recipient.get_username() for n in rows)


def _deliveries(callbacks: list[Callable[[], Any]]) -> list[Callable[[], Any]]:
    """The callbacks that queue the delivery of notifications (``notifications.tell``)."""
    return [cb for cb in callbacks if getattr(cb, "__qualname__", "").startswith("tell.")]


@pytest.mark.parametrize("name", list(EVENTS))
def test_a_rolled_back_change_tells_nobody(
    w: Any, name: str, django_capture_on_commit_callbacks: Any
) -> None:
    event = EVENTS[name]()
    arranged = event.arrange(w)
    Notification.objects.all().delete()  # what arranging the world told is not this event's
    with (
        django_capture_on_commit_callbacks() as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        event.act(w, arranged)
        assert _told(event.kind) == sorted(event.recipients)  # written with the change ...
        raise RuntimeError("the request fails after the change")
    assert _told(event.kind) == []  # ... and gone with it
    assert _deliveries(callbacks) == []
    assert mail.outbox == []


@pytest.mark.parametrize("name", list(EVENTS))
def test_a_committed_change_tells_each_recipient_exactly_once_after_the_commit(
    w: Any, name: str, django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    event = EVENTS[name]()
    arranged = event.arrange(w)
    Notification.objects.all().delete()  # what arranging the world told is not this event's
    queued: list[list[int]] = []  # what the commit hands to Celery (a worker runs it below)
    monkeypatch.setattr(notifications, "_send_later", queued.append)
    with django_capture_on_commit_callbacks() as callbacks:
        event.act(w, arranged)
        assert queued == []  # nothing is queued before the commit
    assert _told(event.kind) == sorted(event.recipients)
    assert mail.outbox == []  # nor sent

    # The commit queues the delivery; the worker's task sends it.
    for callback in _deliveries(callbacks):
        callback()
    for ids in queued:
        deliver_notifications(ids)
    emailed = event.kind in EMAIL_BY_DEFAULT
    expected_mail = sorted(f"{u}@example.org" for u in event.recipients) if emailed else []
    assert sorted(m.to[0] for m in mail.outbox) == expected_mail
    assert bool(queued) == emailed  # job events stay in the app unless asked for

    # Announced again (a retried task, a repeated cycle or pass): nobody hears twice.
    event.again(w, arranged)
    assert _told(event.kind) == sorted(event.recipients)
    for ids in queued:
        assert deliver_notifications(ids) == 0
    assert len(mail.outbox) == len(expected_mail)
