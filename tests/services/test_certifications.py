"""Certified configurations through their services (docs/workloads.md#certified-configurations):
who may propose, certify, reject and revoke; expiry by time and the reminder before it;
the audit entries."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, CertificationState, Notification
from governance.services import certifications as svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.certification_world import G5, P4, certified, make_cert_world, propose

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_cert_world()


def test_a_lead_proposes_with_the_benchmark_audited_and_reviewers_are_told(world):
    cert = propose(world)
    assert cert.state == CertificationState.PROPOSED
    assert cert.configuration == "ml.g5.xlarge x2"
    assert (cert.runtime, cert.converged, cert.output_valid) == (3600, True, True)
    assert (cert.utilization, cert.failure_rate) == (Decimal("87.5"), Decimal("1.25"))
    entry = AuditEntry.objects.get(event_type=AuditEvent.CERTIFICATION_PROPOSED)
    assert entry.actor == world.red_lead and entry.team_id == world.red.pk
    assert entry.after["instance_type"] == G5 and entry.after["runtime"] == 3600
    told = set(
        Notification.objects.filter(kind="certification_review").values_list(
            "recipient__username", flat=True
        )
    )
    assert {"reviewer", "reviewer2", "admin"} <= told


def test_only_the_teams_leads_and_admins_propose(world):
    assert propose(world, actor=world.admin, count=1).state == "proposed"
    for actor in (world.red_member, world.blue_lead, world.reviewer, world.outsider):
        with pytest.raises(PermissionDenied):
            propose(world, actor=actor, count=3)


def test_every_problem_of_a_proposal_at_once(world):
    with pytest.raises(ValidationFailed) as exc:
        propose(
            world,
            instance_type="nope",
            count=0,
            runtime=-5,
            utilization=101,
            failure_rate="x",
            converged="yes",
        )
    assert {"instance_type", "count", "runtime", "utilization", "failure_rate", "converged"} <= set(
        exc.value.errors
    )
    with pytest.raises(ValidationFailed) as both:
        propose(world, plan="some-plan")
    assert "instance_type" in both.value.errors


def test_a_reviewer_who_did_not_propose_certifies_with_a_note_and_it_expires_in_180_days(world):
    cert = propose(world)
    before = timezone.now()
    cert = svc.certification_decide(
        actor=world.reviewer, certification=cert, certify=True, note="benchmark reviewed"
    )
    assert cert.state == CertificationState.CERTIFIED
    assert cert.decided_by == world.reviewer and cert.decision_note == "benchmark reviewed"
    assert before + timedelta(days=180) <= cert.expires_at <= timezone.now() + timedelta(days=180)
    entry = AuditEntry.objects.get(event_type=AuditEvent.CERTIFICATION_CERTIFIED)
    assert entry.reason == "benchmark reviewed" and entry.before["state"] == "proposed"
    assert Notification.objects.filter(
        kind="certification_decided", recipient=world.red_lead
    ).exists()


def test_the_proposer_never_decides_even_as_admin_and_leads_and_members_cannot(world):
    cert = propose(world, actor=world.admin)
    for actor in (world.admin, world.red_lead, world.red_member, world.outsider):
        with pytest.raises(PermissionDenied):
            svc.certification_decide(actor=actor, certification=cert, certify=True, note="ok")
    assert (
        svc.certification_decide(
            actor=world.reviewer2, certification=cert, certify=False, note="no eval run"
        ).state
        == CertificationState.REJECTED
    )


def test_a_decision_needs_a_note_and_a_proposed_configuration(world):
    cert = propose(world)
    with pytest.raises(ValidationFailed) as exc:
        svc.certification_decide(actor=world.reviewer, certification=cert, certify=True, note="")
    assert "note" in exc.value.errors
    svc.certification_decide(actor=world.reviewer, certification=cert, certify=False, note="no")
    assert AuditEntry.objects.filter(event_type=AuditEvent.CERTIFICATION_REJECTED).count() == 1
    with pytest.raises(ValidationFailed) as again:
        svc.certification_decide(actor=world.reviewer, certification=cert, certify=True, note="ok")
    assert "state" in again.value.errors


def test_revocation_by_reviewers_admins_and_the_teams_leads_with_a_reason(world):
    cert = certified(world)
    for actor in (world.red_member, world.blue_lead, world.outsider):
        with pytest.raises(PermissionDenied):
            svc.certification_revoke(actor=actor, certification=cert, reason="new image")
    with pytest.raises(ValidationFailed) as exc:
        svc.certification_revoke(actor=world.red_lead, certification=cert, reason=" ")
    assert "reason" in exc.value.errors
    cert = svc.certification_revoke(actor=world.red_lead, certification=cert, reason="new image")
    assert cert.state == CertificationState.REVOKED and cert.revoke_reason == "new image"
    entry = AuditEntry.objects.get(event_type=AuditEvent.CERTIFICATION_REVOKED)
    assert entry.actor == world.red_lead and entry.reason == "new image"
    other = certified(world, instance_type=P4, count=1)
    assert (
        svc.certification_revoke(
            actor=world.reviewer2, certification=other, reason="driver bug"
        ).state
        == "revoked"
    )


def test_expiry_by_time_the_setting_and_one_reminder_before_it(world, settings):
    settings.CERTIFICATION_VALID_DAYS = 30
    settings.CERTIFICATION_REMINDER_DAYS = 7
    cert = certified(world)
    now = timezone.now()
    assert cert.expires_at - cert.decided_at == timedelta(days=30)
    assert cert.in_force(now) and cert.status(now) == "certified"
    assert svc.certifications_remind(now=now) == 0
    nearly = cert.expires_at - timedelta(days=6)
    assert svc.certifications_remind(now=nearly) == 1
    assert svc.certifications_remind(now=nearly + timedelta(hours=1)) == 0
    reminders = Notification.objects.filter(kind="certification_expiring")
    assert [n.recipient.username for n in reminders] == ["red_lead"]  # who proposed it too
    later = cert.expires_at + timedelta(seconds=1)
    assert not cert.in_force(later) and cert.status(later) == "expired"
    assert svc.certified_for(world.workload.pk, later) == {}
    assert list(svc.certified_for(world.workload.pk, now)) == [("type", G5, 2)]
