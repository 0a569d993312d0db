"""Decisions (docs/workloads.md#decisions): a job failed by its share's preemption retry
limit is not an incident but a question for its team's leads, due within
``DECISION_DUE_HOURS``: resubmit the work (``services/resubmissions.py``: it submits a
job, so it lives apart from what the scheduler calls), reclassify its workload as
``protected``, or close it with a reason.

Each function validates its whole input (errors keyed by the field, naming the rule) and
writes the change and its audit entry in one transaction.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from governance import roles
from governance.models import AuditEvent, Decision, DecisionState, Interruption, Job
from governance.roles import AnyUser
from governance.services import audit, limits, notifications
from governance.services import workloads as workload_services
from governance.services.errors import (
    Errors,
    NotFound,
    PermissionDenied,
)
from governance.services.kit import job_event

NOTE_MAX_LENGTH = 2000


def decision_snapshot(decision: Decision) -> dict[str, Any]:
    """The decision's API fields as JSON, for audit ``before``/``after``."""
    return {
        "id": decision.pk,
        "job": decision.job_id,
        "team": decision.team_id,
        "state": decision.state,
        "due_at": decision.due_at.isoformat(),
        "decided_by": decision.decided_by_id,
        "note": decision.note,
        "resubmitted_job": decision.resubmitted_job_id,
    }


def may_decide(actor: AnyUser, team_id: int) -> bool:
    """The team's leads and admins answer its decisions."""
    return roles.is_admin(actor) or roles.is_lead_of(actor, team_id)


def _audit(
    event: AuditEvent,
    actor: AnyUser | None,
    decision: Decision,
    before: Any,
    *,
    reason: str = "",
    at: datetime | None = None,
) -> None:
    job = decision.job
    audit.record(
        event_type=event,
        actor=actor,
        subject=decision,
        before=before,
        after=decision_snapshot(decision),
        reason=reason,
        team_id=decision.team_id,
        share_id=job.share_id,
        job_id=job.pk,
        queue_id=job.queue_id,
        at=at,
    )


def decision_open(*, job: Job, now: datetime) -> Decision:
    """The retry limit failed ``job`` (the scheduler, in its transaction): open its
    decision, due ``DECISION_DUE_HOURS`` from now, and tell the team's leads. A job has
    one decision; opening it again returns the one there is."""
    existing = Decision.objects.filter(job=job).first()
    if existing is not None:
        return existing
    decision = Decision.objects.create(
        job=job,
        team_id=job.share.team_id,
        opened_at=now,
        due_at=now + timedelta(hours=settings.DECISION_DUE_HOURS),
    )
    _audit(
        AuditEvent.DECISION_OPENED,
        None,
        decision,
        None,
        reason=f"Job {job.pk} exhausted its preemption retries: resubmit, reclassify or close.",
        at=now,
    )
    notifications.decision_opened(decision, at=now)
    return decision


def _lock(decision: Decision | int) -> Decision:
    decision_id = decision.pk if isinstance(decision, Decision) else decision
    found = (
        Decision.objects.select_for_update(of=("self",))
        .select_related("team", "job__share", "job__workload")
        .filter(pk=decision_id)
        .first()
        if limits.valid_id(decision_id)
        else None
    )
    if found is None:
        raise NotFound({"detail": [f"No decision with id {decision_id}."]})
    return found


def open_for(actor: AnyUser, decision: Decision | int, field: str) -> Decision:
    """The decision locked, once the actor may answer it; every problem with it is
    collected by the caller (``state`` when it was already answered)."""
    locked = _lock(decision)
    if not may_decide(actor, locked.team_id):
        raise PermissionDenied(
            {field: [f"Only leads of team {locked.team.name} and admins may answer its decisions."]}
        )
    return locked


def check_open(errors: Errors, decision: Decision) -> None:
    if decision.state != DecisionState.OPEN:
        errors.add("state", f"Decision {decision.pk} was already answered: {decision.state}.")


def clean_note(errors: Errors, field: str, value: Any, *, required: bool) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        errors.add(field, "Must be text.")
        return ""
    clean = value.strip()
    if required and not clean:
        errors.add(field, "Say why the work is closed without being resubmitted.")
    elif len(clean) > NOTE_MAX_LENGTH:
        errors.add(field, f"At most {NOTE_MAX_LENGTH} characters.")
    return clean


def decide(
    decision: Decision,
    *,
    actor: AnyUser,
    state: DecisionState,
    note: str,
    event: AuditEvent,
    before: dict[str, Any],
    now: datetime,
) -> None:
    decision.state = state
    decision.decided_at = now
    decision.decided_by = cast(Any, actor)
    decision.note = note
    decision.save()
    _audit(event, actor, decision, before, reason=note, at=now)
    job_event(
        decision.job,
        now,
        "decided",
        f"Decision {decision.pk}: {state} by {actor.get_username()}"
        + (f": {note}" if note else "."),
        decision=decision.pk,
        state=str(state),
    )


def decision_reclassify(*, actor: AnyUser, decision: Decision | int, note: Any = "") -> Decision:
    """Answer by making the failed job's workload ``protected`` (its team's leads,
    admins): its jobs submitted from then on never borrow and are never in-share victims,
    so the retry limit no longer applies to them. The job must name a workload. Audited
    as DECISION_RECLASSIFIED (and the workload's change as WORKLOAD_UPDATED)."""
    with transaction.atomic():
        locked = open_for(actor, decision, "state")
        errors = Errors()
        check_open(errors, locked)
        clean = clean_note(errors, "note", note, required=False)
        if locked.job.workload_id is None:
            errors.add(
                "workload",
                f"Job {locked.job_id} names no workload to reclassify: resubmit it or close "
                "the decision.",
            )
        errors.raise_if_any()
        workload_services.workload_update(
            actor=actor,
            workload=cast(int, locked.job.workload_id),
            changes={"interruption": Interruption.PROTECTED},
        )
        before = decision_snapshot(locked)
        decide(
            locked,
            actor=actor,
            state=DecisionState.RECLASSIFIED,
            note=clean,
            event=AuditEvent.DECISION_RECLASSIFIED,
            before=before,
            now=timezone.now(),
        )
    return locked


def decision_close(*, actor: AnyUser, decision: Decision | int, reason: Any) -> Decision:
    """Answer by closing with a reason (required; its team's leads, admins): the work is
    not run again. Audited as DECISION_CLOSED."""
    with transaction.atomic():
        locked = open_for(actor, decision, "state")
        errors = Errors()
        check_open(errors, locked)
        clean = clean_note(errors, "reason", reason, required=True)
        errors.raise_if_any()
        before = decision_snapshot(locked)
        decide(
            locked,
            actor=actor,
            state=DecisionState.CLOSED,
            note=clean,
            event=AuditEvent.DECISION_CLOSED,
            before=before,
            now=timezone.now(),
        )
    return locked


def decisions_remind(*, now: datetime | None = None) -> int:
    """Beat's pass (the notification sweep): tell the leads of each open decision once
    when its due time is ``DECISION_REMINDER_HOURS`` away and once when it came. Returns
    how many notifications were written."""
    now = now or timezone.now()
    soon = now + timedelta(hours=settings.DECISION_REMINDER_HOURS)
    told = 0
    # Not yet told what there is to tell now: near and never reminded, or due and not
    # reminded at its due time.
    due_ids = list(
        Decision.objects.filter(state=DecisionState.OPEN, due_at__lte=soon)
        .filter(Q(reminded_soon_at__isnull=True) | Q(due_at__lte=now, reminded_due_at__isnull=True))
        .values_list("pk", flat=True)
    )
    for decision_id in due_ids:
        with transaction.atomic():
            locked = _lock(decision_id)
            if locked.state != DecisionState.OPEN:
                continue
            if locked.due_at <= now and locked.reminded_due_at is None:
                told += notifications.decision_reminder(locked, overdue=True, at=now)
                locked.reminded_due_at = now
                # Past due with no earlier reminder: the one at the due time says it all.
                locked.reminded_soon_at = locked.reminded_soon_at or now
            elif locked.reminded_soon_at is None:
                told += notifications.decision_reminder(locked, overdue=False, at=now)
                locked.reminded_soon_at = now
            else:
                continue
            locked.save(update_fields=["reminded_soon_at", "reminded_due_at"])
    return told
