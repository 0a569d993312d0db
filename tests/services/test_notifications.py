"""Notifications: each event tells each recipient exactly once, once the change commits;
a rolled-back change tells nobody; email and webhooks leave after the commit."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from governance.models import (
    AuditEntry,
    AuditEvent,
    Notification,
    NotificationKind,
    Policy,
)
from governance.services import agreements, exceptions, notifications, shares
from governance.services.errors import ValidationFailed
from scheduler.cycle.run import run_cycle
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture
def w() -> Any:
    world = make_world()
    for user in (world.reviewer, world.admin, world.red_lead, world.red_member):
        user.email = f"{user.username}@example.org"
        user.save()
    return world


def told(kind: NotificationKind) -> list[tuple[str, str]]:
    rows = Notification.objects.filter(kind=kind).select_related("recipient")
    return sorted((n.recipient.username, n.key) for n in rows)


def file_exception(w: Any) -> Any:
    return exceptions.exception_file(
        actor=w.red_lead,
        team=w.red,
        share=w.red_share,
        priority=2000,
        justification="release blocked",
        expires_at=timezone.now() + timedelta(days=2),
    )


def test_a_filed_exception_tells_every_reviewer_once(
    w: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        exc = file_exception(w)
    key = f"exception.filed:{exc.pk}"
    # Reviewers and admins; not the lead who filed it.
    assert told(NotificationKind.EXCEPTION_NEEDS_REVIEW) == [("admin", key), ("reviewer", key)]
    assert callbacks  # delivery is queued for after the commit
    notifications.exception_filed(exc, w.red_lead)  # told again: nobody hears twice
    assert Notification.objects.filter(key=key).count() == 2


def test_a_rolled_back_change_tells_nobody(w: Any, django_capture_on_commit_callbacks: Any) -> None:
    with (
        django_capture_on_commit_callbacks() as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        file_exception(w)
        raise RuntimeError("the request failed after the filing")
    assert not Notification.objects.exists()
    assert callbacks == []


def test_a_decision_tells_the_requester_and_the_team_leads(w: Any) -> None:
    exc = file_exception(w)
    exceptions.exception_approve(actor=w.reviewer, exception=exc, note="go ahead")
    key = f"exception.decided:{exc.pk}"
    assert told(NotificationKind.EXCEPTION_DECIDED) == [("red_lead", key)]
    note = Notification.objects.get(kind=NotificationKind.EXCEPTION_DECIDED)
    assert "approved by reviewer" in note.title and note.url == f"/exceptions/{exc.pk}/"


def test_a_preemption_tells_the_submitter_and_the_leads_once(w: Any) -> None:
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
    blue_share = type(w.blue_share).objects.get(pk=w.blue_share.pk)
    borrower = make_job(
        blue_share,
        w.blue_lead,
        name="borrower",
        preferences=[{"instance_type": G5, "count": 4}],
        duration=3600,
        submitted_at=now,
    )
    run_cycle(w.queue.pk, now=now)
    make_job(w.red_share, w.red_member, name="owner", duration=60, submitted_at=now)
    run_cycle(w.queue.pk, now=now + timedelta(seconds=1))
    key = f"job.preempted:{borrower.pk}:1"
    assert borrower.submitter == w.blue_lead  # the submitter is the lead: told once
    assert told(NotificationKind.JOB_PREEMPTED) == [("blue_lead", key)]
    run_cycle(w.queue.pk, now=now + timedelta(seconds=2))  # nothing new happens
    assert Notification.objects.filter(kind=NotificationKind.JOB_PREEMPTED).count() == 1


def test_a_share_change_tells_its_team_but_not_the_admin(w: Any) -> None:
    shares.share_update(
        actor=w.admin,
        share=w.red_share,
        version=w.red_share.version,
        changes={"limits": {G5: 3, "ml.p4d.24xlarge": 1}},
        reason="more for the launch",
    )
    assert [name for name, _ in told(NotificationKind.SHARE_CHANGED)] == [
        "red_lead",
        "red_member",
    ]


def test_an_agreement_due_for_review_tells_owner_editors_and_reviewers_once(w: Any) -> None:
    agreement = agreements.agreement_create(
        actor=w.admin,
        title="Red's GPUs",
        owner=w.red_lead.username,
        editors=[w.red_member.username],
        review_by=timezone.localdate(),
    )
    assert notifications.agreements_due() == 4
    assert notifications.agreements_due() == 0
    key = f"agreement.review:{agreement.pk}:{agreement.review_by}"
    assert told(NotificationKind.AGREEMENT_REVIEW_DUE) == [
        ("admin", key),
        ("red_lead", key),
        ("red_member", key),
        ("reviewer", key),
    ]


def test_an_agreement_is_reminded_before_its_review_date_then_when_due(
    w: Any, settings: Any
) -> None:
    settings.AGREEMENT_REVIEW_REMINDER_DAYS = 14
    today = timezone.localdate()
    agreement = agreements.agreement_create(
        actor=w.admin,
        title="Red's GPUs",
        owner=w.red_lead.username,
        review_by=today + timedelta(days=10),
    )
    agreements.agreement_create(
        actor=w.admin, title="Far off", review_by=today + timedelta(days=16)
    )
    assert (
        notifications.agreements_due(today=today - timedelta(days=5)) == 0
    )  # 15 days ahead: not yet
    assert notifications.agreements_due(today=today) == 3  # owner, reviewer, admin
    assert notifications.agreements_due(today=today + timedelta(days=1)) == 0  # told once
    soon = f"agreement.review_soon:{agreement.pk}:{agreement.review_by}"
    assert told(NotificationKind.AGREEMENT_REVIEW_SOON) == [
        ("admin", soon),
        ("red_lead", soon),
        ("reviewer", soon),
    ]
    # due now (3); and "Far off" comes within 14 days (its owner the admin, the reviewer)
    assert notifications.agreements_due(today=today + timedelta(days=10)) == 3 + 2
    due = f"agreement.review:{agreement.pk}:{agreement.review_by}"
    assert [n for n, key in told(NotificationKind.AGREEMENT_REVIEW_DUE) if key == due] == [
        "admin",
        "red_lead",
        "reviewer",
    ]


def test_email_leaves_once_after_the_commit(w: Any) -> None:
    exc = file_exception(w)
    assert mail.outbox == []  # nothing is sent by the service itself
    ids = list(Notification.objects.values_list("pk", flat=True))
    assert notifications.deliver(ids) == 2
    assert sorted(m.to[0] for m in mail.outbox) == ["admin@example.org", "reviewer@example.org"]
    assert f"/exceptions/{exc.pk}/" in mail.outbox[0].body
    assert notifications.deliver(ids) == 0  # a retried task sends nothing twice
    assert notifications.deliver_due(now=timezone.now() + timedelta(minutes=5)) == 0


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        _Hook.received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_a_webhook_gets_slack_compatible_json(w: Any) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hook"
        notifications.notification_preferences_update(
            actor=w.reviewer,
            email_kinds=[],
            webhook_kinds=[NotificationKind.EXCEPTION_NEEDS_REVIEW],
            webhook_url=url,
        )
        exc = file_exception(w)
        ids = list(Notification.objects.values_list("pk", flat=True))
        notifications.deliver(ids)
    finally:
        server.shutdown()
    [payload] = _Hook.received
    assert payload["kind"] == "exception_needs_review"
    assert "Exception to review" in payload["text"] and f"/exceptions/{exc.pk}/" in payload["text"]
    assert [m.to[0] for m in mail.outbox] == ["admin@example.org"]  # the reviewer opted out


def test_preferences_are_validated_and_audited(w: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        notifications.notification_preferences_update(
            actor=w.red_lead, email_kinds=["nope"], webhook_url="ftp://x"
        )
    assert set(caught.value.errors) == {"email_kinds", "webhook_url"}
    notifications.notification_preferences_update(actor=w.red_lead, email_kinds=[])
    entry = AuditEntry.objects.get(event_type=AuditEvent.NOTIFICATION_PREFERENCES_CHANGED)
    assert entry.after["email_kinds"] == [] and entry.actor_id == w.red_lead.pk
