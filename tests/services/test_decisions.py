"""Decisions (docs/workloads.md#decisions): the retry limit opens one; the team's leads
and admins resubmit, reclassify or close it, each audited; reminders come once each."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from governance.models import (
    AuditEntry,
    AuditEvent,
    Decision,
    DecisionState,
    Interruption,
    Job,
    JobState,
    Notification,
    NotificationKind,
)
from governance.services import decisions as decision_services
from governance.services.errors import PermissionDenied, ValidationFailed
from governance.services.resubmissions import decision_resubmit
from tests.factories import make_decision_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
G6 = "ml.g6.xlarge"


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


@pytest.fixture
def world() -> Any:
    return make_decision_world()


def entries(event: AuditEvent) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(event_type=event).order_by("id"))


def told(kind: NotificationKind) -> list[str]:
    return sorted(
        Notification.objects.filter(kind=kind).values_list("recipient__username", flat=True)
    )


def test_the_retry_limit_opens_a_decision_for_the_teams_leads(world: Any, settings: Any) -> None:
    d = world.decision
    assert d.state == DecisionState.OPEN and d.team == world.team
    assert d.due_at - d.opened_at == timedelta(hours=settings.DECISION_DUE_HOURS)
    assert d.opened_at == world.job.finished_at
    [opened] = entries(AuditEvent.DECISION_OPENED)
    assert opened.actor_id is None and opened.job_id == world.job.pk
    assert opened.after["state"] == "open"
    # Leads hear; the submitter (a member) hears of the failure, not of the decision.
    assert told(NotificationKind.DECISION_OPENED) == ["lead"]
    # Opening again (a repeated cycle) keeps the one decision.
    again = decision_services.decision_open(job=world.job, now=world.job.finished_at)
    assert again.pk == d.pk and Decision.objects.count() == 1


def test_a_lead_resubmits_a_copy_with_other_preferences(world: Any) -> None:
    d = decision_resubmit(
        actor=world.lead,
        decision=world.decision,
        changes={"preferences": [{"instance_type": G6, "count": 1}], "name": "again"},
        note="try g6",
    )
    assert d.state == DecisionState.RESUBMITTED and d.decided_by == world.lead
    new = Job.objects.get(pk=d.resubmitted_job_id)
    assert (new.name, new.state, new.submitter) == ("again", JobState.PENDING, world.lead)
    assert new.preferences == [{"instance_type": G6, "count": 1}]
    # The rest is the failed job's.
    assert (new.share, new.workload, new.duration, new.priority) == (
        world.share,
        world.workload,
        600,
        world.job.priority,
    )
    assert new.resubmitted_for == d
    [entry] = entries(AuditEvent.DECISION_RESUBMITTED)
    assert entry.actor_id == world.lead.pk and entry.reason == "try g6"
    assert entry.after["resubmitted_job"] == new.pk and entry.before["state"] == "open"
    assert new.events.filter(type="resubmitted").exists()
    assert world.job.events.filter(type="decided").exists()


def test_a_resubmission_with_no_changes_is_a_copy(world: Any) -> None:
    d = decision_resubmit(actor=world.admin, decision=world.decision)
    new = Job.objects.get(pk=d.resubmitted_job_id)
    assert new.preferences == world.job.preferences and new.name == world.job.name


def test_a_resubmission_reports_every_problem_at_once_and_writes_nothing(world: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        decision_resubmit(
            actor=world.lead,
            decision=world.decision,
            changes={
                "preferences": [{"instance_type": "ml.nope", "count": 1}],
                "queue": 4,
                "max_pending": -1,
            },
            note="x" * 3000,
        )
    assert {"preferences", "queue", "max_pending", "note"} <= set(caught.value.errors)
    world.decision.refresh_from_db()
    assert world.decision.state == DecisionState.OPEN
    assert Job.objects.count() == 2  # the failed job and the one that preempted it
    assert not entries(AuditEvent.DECISION_RESUBMITTED)


@pytest.mark.parametrize("who", ["member", "other_lead"])
def test_only_the_teams_leads_and_admins_answer(world: Any, who: str) -> None:
    actor = getattr(world, who)
    for answer in (
        lambda: decision_resubmit(actor=actor, decision=world.decision),
        lambda: decision_services.decision_reclassify(actor=actor, decision=world.decision),
        lambda: decision_services.decision_close(actor=actor, decision=world.decision, reason="no"),
    ):
        with pytest.raises(PermissionDenied):
            answer()
    world.decision.refresh_from_db()
    assert world.decision.state == DecisionState.OPEN


def test_a_lead_reclassifies_the_workload_as_protected(world: Any) -> None:
    d = decision_services.decision_reclassify(
        actor=world.lead, decision=world.decision, note="cannot stand reclaims"
    )
    assert d.state == DecisionState.RECLASSIFIED
    world.workload.refresh_from_db()
    assert world.workload.interruption == Interruption.PROTECTED
    [entry] = entries(AuditEvent.DECISION_RECLASSIFIED)
    assert entry.actor_id == world.lead.pk and entry.reason == "cannot stand reclaims"
    [changed] = entries(AuditEvent.WORKLOAD_UPDATED)
    assert changed.after["interruption"] == "protected"


def test_reclassify_needs_a_workload(world: Any) -> None:
    Job.objects.filter(pk=world.job.pk).update(workload=None)
    with pytest.raises(ValidationFailed) as caught:
        decision_services.decision_reclassify(actor=world.lead, decision=world.decision)
    assert "workload" in caught.value.errors


def test_close_needs_a_reason_and_answers_once(world: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        decision_services.decision_close(actor=world.lead, decision=world.decision, reason="  ")
    assert "reason" in caught.value.errors
    d = decision_services.decision_close(
        actor=world.lead, decision=world.decision, reason="superseded by a new model"
    )
    assert (d.state, d.note) == (DecisionState.CLOSED, "superseded by a new model")
    [entry] = entries(AuditEvent.DECISION_CLOSED)
    assert entry.reason == "superseded by a new model"
    with pytest.raises(ValidationFailed) as again:
        decision_resubmit(actor=world.lead, decision=d)
    assert "already answered" in again.value.errors["state"][0]
    with pytest.raises(ValidationFailed):
        decision_services.decision_reclassify(actor=world.admin, decision=d)


def test_reminders_before_and_at_the_due_time_once_each(world: Any, settings: Any) -> None:
    d = world.decision
    early = d.due_at - timedelta(hours=settings.DECISION_REMINDER_HOURS + 1)
    assert decision_services.decisions_remind(now=early) == 0
    soon = d.due_at - timedelta(hours=1)
    assert decision_services.decisions_remind(now=soon) == 1
    assert decision_services.decisions_remind(now=soon + timedelta(minutes=5)) == 0
    assert told(NotificationKind.DECISION_DUE_SOON) == ["lead"]
    late = d.due_at + timedelta(minutes=1)
    assert decision_services.decisions_remind(now=late) == 1
    assert decision_services.decisions_remind(now=late + timedelta(hours=3)) == 0
    assert told(NotificationKind.DECISION_OVERDUE) == ["lead"]


def test_an_answered_decision_is_not_reminded(world: Any) -> None:
    decision_services.decision_close(actor=world.lead, decision=world.decision, reason="done")
    late = world.decision.due_at + timedelta(hours=1)
    assert decision_services.decisions_remind(now=late) == 0
