"""Share change requests through the services: the whole life of a request, who may do
what, the audit entries and notifications of each step, and approval after the share
changed meanwhile."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from governance.models import (
    AuditEntry,
    AuditEvent,
    ChangeRequestState,
    JobState,
    Notification,
    Share,
    ShareChangeRequest,
)
from governance.selectors import scheduling
from governance.services import change_requests as svc
from governance.services import shares as share_svc
from governance.services.errors import Conflict, PermissionDenied, ValidationFailed
from scheduler.cycle.run import run_cycle
from tests.factories import make_admin, make_job, make_lead, make_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"


@pytest.fixture
def w(settings: Any) -> Any:
    settings.DEMO_TIME_FACTOR = 1
    world = make_world()
    # red runs 2 x g5 within its limit of 2: a lower limit would leave it borrowing.
    world.job = make_job(
        world.red_share,
        world.red_member,
        name="red-run",
        preferences=[{"instance_type": G5, "count": 2}],
        duration=36000,
        submitted_at=timezone.now() - timedelta(seconds=5),
    )
    run_cycle(world.queue.pk, now=timezone.now())
    world.job.refresh_from_db()
    assert world.job.state == JobState.RUNNING
    return world


def file(w: Any, actor: Any = None, **changes: Any) -> ShareChangeRequest:
    return svc.change_request_file(
        actor=actor or w.red_lead,
        share=w.red_share,
        changes=changes or {"limits": {G5: 1, P4: 1}},
        justification="Our training moved to p4d; give g5 back to the queue.",
    )


def entries(event: AuditEvent) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(event_type=event).order_by("id"))


def told(user: Any, kind: str) -> list[Notification]:
    return list(Notification.objects.filter(recipient=user, kind=kind))


def test_a_lead_files_with_the_preview_stored_audited_and_admins_told(w: Any) -> None:
    cr = file(w)
    assert cr.state == ChangeRequestState.PENDING
    assert cr.base_version == w.red_share.version and cr.team == w.red
    assert cr.proposed == {"limits": {G5: 1, P4: 1}}
    # The stored preview is the share editor's: red's running job would sit beyond the
    # new limit of 1, open to reclaim; nothing is stopped by the change itself.
    assert [r["job"] for r in cr.preview["reclaimable"]] == [w.job.pk]
    assert cr.preview["preempted"] == []
    assert cr.preview == scheduling.change_request_preview(w.red_share, cr.proposed)
    (entry,) = entries(AuditEvent.CHANGE_REQUEST_FILED)
    assert entry.actor == w.red_lead and entry.share_id == w.red_share.pk
    assert entry.team_id == w.red.pk and entry.after["state"] == "pending"
    assert entry.reason == cr.justification
    assert told(w.admin, "change_request_review")
    assert not told(w.red_lead, "change_request_review")  # not told of one's own act
    # Filing changes nothing of the share.
    share = Share.objects.get(pk=w.red_share.pk)
    assert share.version == w.red_share.version
    assert share_svc.limits_map(share) == {G5: 2, P4: 1}


@pytest.mark.parametrize("who", ["red_member", "blue_lead", "reviewer", "admin", "outsider"])
def test_only_a_lead_of_the_share_team_files(w: Any, who: str) -> None:
    with pytest.raises(PermissionDenied):
        file(w, getattr(w, who))
    assert not ShareChangeRequest.objects.exists()
    assert not entries(AuditEvent.CHANGE_REQUEST_FILED)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"enabled": False}, "enabled"),
        ({"name": "mine"}, "name"),
        ({"limits": {"ml.unknown": 1}}, "limits"),
        ({"limits": {G5: -1}}, "limits"),
        ({"borrow_limit": 50}, "borrow_limit"),
        ({"preemption_retries": 10**9}, "preemption_retries"),
        ({"limits": {G5: 2, P4: 1}}, "changes"),  # the current settings
    ],
)
def test_bad_proposals_are_refused_naming_the_field(
    w: Any, changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        file(w, **changes)
    assert field in caught.value.errors, caught.value.errors
    assert not ShareChangeRequest.objects.exists()


def test_a_justification_is_required_and_bounded(w: Any) -> None:
    for text in ("  ", "x" * 4001):
        with pytest.raises(ValidationFailed) as caught:
            svc.change_request_file(
                actor=w.red_lead, share=w.red_share, changes={"policy": "LEND"}, justification=text
            )
        assert "justification" in caught.value.errors


def test_approval_saves_through_the_share_service_with_the_request_as_reason(w: Any) -> None:
    cr = file(w)
    version = w.red_share.version
    svc.change_request_approve(actor=w.admin, request=cr.pk, note="Fine by capacity planning.")
    cr.refresh_from_db()
    share = Share.objects.get(pk=w.red_share.pk)
    assert cr.state == ChangeRequestState.APPROVED and cr.decided_by == w.admin
    assert share.version == version + 1 == cr.applied_version
    assert share_svc.limits_map(share) == {G5: 1, P4: 1}
    (edit,) = entries(AuditEvent.SHARE_UPDATED)
    assert edit.actor == w.admin
    assert edit.reason.startswith(f"Change request {cr.pk} of red_lead: ")
    assert edit.before["limits"] == {G5: 2, P4: 1} and edit.after["limits"] == {G5: 1, P4: 1}
    (approved,) = entries(AuditEvent.CHANGE_REQUEST_APPROVED)
    assert approved.before["state"] == "pending" and approved.after["state"] == "approved"
    assert approved.reason == "Fine by capacity planning."
    assert cr.decision_preview is not None
    assert [r["job"] for r in cr.decision_preview["reclaimable"]] == [w.job.pk]
    assert told(w.red_lead, "change_request_decided")
    # Changing a share never stops a job by itself.
    w.job.refresh_from_db()
    assert w.job.state == JobState.RUNNING


@pytest.mark.parametrize("who", ["red_lead", "red_member", "blue_lead", "reviewer"])
def test_only_admins_decide(w: Any, who: str) -> None:
    cr = file(w)
    for decide in (svc.change_request_approve, svc.change_request_reject):
        with pytest.raises(PermissionDenied):
            decide(actor=getattr(w, who), request=cr.pk, note="no")
    cr.refresh_from_db()
    assert cr.state == ChangeRequestState.PENDING


def test_an_admin_who_filed_as_lead_does_not_decide_it(w: Any) -> None:
    boss = make_admin("boss")
    make_lead(w.red, "boss")
    cr = file(w, boss)
    with pytest.raises(PermissionDenied):
        svc.change_request_approve(actor=boss, request=cr.pk)
    svc.change_request_approve(actor=w.admin, request=cr.pk)


def test_approval_after_the_share_changed_needs_the_admin_to_confirm_it(w: Any) -> None:
    cr = file(w)
    # Meanwhile another admin turns in-share preemption on (version goes up).
    other = make_admin("other_admin")
    share_svc.share_update(
        actor=other,
        share=w.red_share.pk,
        version=w.red_share.version,
        changes={"in_share_preemption": True},
        reason="Let red's urgent runs stop its own batch work.",
    )
    current = Share.objects.get(pk=w.red_share.pk).version
    assert current == cr.base_version + 1
    with pytest.raises(Conflict) as caught:
        svc.change_request_approve(actor=w.admin, request=cr.pk)
    assert "confirm_version" in caught.value.errors
    body = caught.value.current
    assert isinstance(body, dict)
    assert body["share"]["version"] == current
    assert body["changed_since_filing"] == [
        {"field": "in_share_preemption", "at_filing": False, "now": True}
    ]
    assert [r["job"] for r in body["preview"]["reclaimable"]] == [w.job.pk]
    # A stale confirmation is refused the same way; nothing changed either time.
    with pytest.raises(Conflict):
        svc.change_request_approve(actor=w.admin, request=cr.pk, confirm_version=current - 1)
    assert not entries(AuditEvent.CHANGE_REQUEST_APPROVED)
    assert ShareChangeRequest.objects.get(pk=cr.pk).state == ChangeRequestState.PENDING

    svc.change_request_approve(actor=w.admin, request=cr.pk, confirm_version=current)
    share = Share.objects.get(pk=w.red_share.pk)
    assert share.version == current + 1
    assert share_svc.limits_map(share) == {G5: 1, P4: 1}
    # Only the proposed field was written: the other admin's change stands.
    assert share.in_share_preemption is True


def test_approval_applies_the_proposal_on_top_of_a_change_made_meanwhile(w: Any) -> None:
    cr = file(w, policy="LEND_AND_BORROW", borrow_limit=100)
    share_svc.share_update(
        actor=w.admin,
        share=w.red_share.pk,
        version=w.red_share.version,
        changes={"policy": "LEND"},
        reason="lend for now",
    )
    current = Share.objects.get(pk=w.red_share.pk).version
    svc.change_request_approve(actor=w.admin, request=cr.pk, confirm_version=current)
    assert Share.objects.get(pk=w.red_share.pk).policy == "LEND_AND_BORROW"


def test_rejection_needs_a_reason_and_tells_the_requester(w: Any) -> None:
    cr = file(w)
    with pytest.raises(ValidationFailed) as caught:
        svc.change_request_reject(actor=w.admin, request=cr.pk, note=" ")
    assert "note" in caught.value.errors
    svc.change_request_reject(actor=w.admin, request=cr.pk, note="g5 is contracted to red.")
    cr.refresh_from_db()
    assert cr.state == ChangeRequestState.REJECTED
    assert cr.decision_note == "g5 is contracted to red."
    (entry,) = entries(AuditEvent.CHANGE_REQUEST_REJECTED)
    assert entry.reason == "g5 is contracted to red." and entry.actor == w.admin
    assert told(w.red_lead, "change_request_decided")
    assert not entries(AuditEvent.SHARE_UPDATED)
    with pytest.raises(ValidationFailed) as caught:
        svc.change_request_approve(actor=w.admin, request=cr.pk)
    assert "state" in caught.value.errors


def test_only_the_requester_withdraws_and_only_a_pending_request(w: Any) -> None:
    other_lead = make_lead(w.red, "red_lead_2")
    cr = file(w)
    for who in (other_lead, w.admin, w.red_member):
        with pytest.raises(PermissionDenied):
            svc.change_request_withdraw(actor=who, request=cr.pk)
    svc.change_request_withdraw(actor=w.red_lead, request=cr.pk, note="Not needed after all.")
    cr.refresh_from_db()
    assert cr.state == ChangeRequestState.WITHDRAWN
    (entry,) = entries(AuditEvent.CHANGE_REQUEST_WITHDRAWN)
    assert entry.actor == w.red_lead and entry.reason == "Not needed after all."
    assert told(w.admin, "change_request_decided")  # nothing left for them to review
    with pytest.raises(ValidationFailed):
        svc.change_request_withdraw(actor=w.red_lead, request=cr.pk)
    with pytest.raises(ValidationFailed):
        svc.change_request_approve(actor=w.admin, request=cr.pk)


def test_policy_changes_count_change_requests_per_team(w: Any) -> None:
    start = timezone.now() - timedelta(minutes=1)
    approved = file(w)
    svc.change_request_approve(actor=w.admin, request=approved.pk)
    rejected = file(w, policy="LEND")
    svc.change_request_reject(actor=w.admin, request=rejected.pk, note="no")
    withdrawn = file(w, preemption_retries=3)
    svc.change_request_withdraw(actor=w.red_lead, request=withdrawn.pk)
    file(w, in_share_preemption=True)
    stop = timezone.now() + timedelta(minutes=1)
    answer = scheduling.queue_signals(w.queue, start, stop, group_by="team")
    groups = {g["team"]: g for g in answer["groups"]}
    assert groups["red"]["policy_changes"]["change_requests"] == {
        "filed": 4,
        "approved": 1,
        "rejected": 1,
        "withdrawn": 1,
    }
    assert groups["red"]["policy_changes"]["share_edits"] == 1  # the approval's edit
    assert groups["blue"]["policy_changes"]["change_requests"] == {
        "filed": 0,
        "approved": 0,
        "rejected": 0,
        "withdrawn": 0,
    }


def test_a_share_with_change_requests_is_disabled_not_deleted() -> None:
    world = make_world()
    svc.change_request_file(
        actor=world.blue_lead,
        share=world.blue_share,
        changes={"policy": "LEND"},
        justification="Nobody in blue runs at night.",
    )
    with pytest.raises(ValidationFailed) as caught:
        share_svc.share_delete(actor=world.admin, share=world.blue_share)
    assert "change requests" in caught.value.errors["share"][0]
    assert Share.objects.filter(pk=world.blue_share.pk).exists()


def test_a_lead_proposes_borrowing_only_for_verified_recovery(w: Any) -> None:
    cr = file(w, borrow_requires_verified_recovery=True)
    assert cr.proposed == {"borrow_requires_verified_recovery": True}
    svc.change_request_approve(actor=w.admin, request=cr.pk, note="")
    share = Share.objects.get(pk=w.red_share.pk)
    assert share.borrow_requires_verified_recovery is True
    (edit,) = entries(AuditEvent.SHARE_UPDATED)
    assert edit.after["borrow_requires_verified_recovery"] is True
    with pytest.raises(ValidationFailed) as caught:
        file(w, borrow_requires_verified_recovery="yes")
    assert "borrow_requires_verified_recovery" in caught.value.errors
