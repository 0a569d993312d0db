"""Priority exceptions: filing, deciding, withdrawing and expiring (docs/data-model.md).

A team lead asks to run one job, or every job of one share, above the highest band
they may use. Someone else (a reviewer or an admin) decides. An approved job exception
raises the job's priority at once and the previous priority comes back when the
exception is withdrawn or expires (unless somebody changed the priority since); an
approved share exception lets the share's jobs be submitted or reprioritised up to its
priority while it lasts, and changes no existing job.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from django.db import transaction
from django.utils import timezone

from governance import roles
from governance.models import AuditEvent, ExceptionState, Job, PriorityException, Share, Team
from governance.models.exceptions import MAX_EXCEPTION_DAYS
from governance.models.jobs import ACTIVE_STATES
from governance.models.priorities import MAX_PRIORITY, MIN_PRIORITY
from governance.roles import AnyUser
from governance.selectors import priorities as priority_selectors
from governance.services import audit, hooks, limits, notifications
from governance.services.errors import Errors, NotFound, PermissionDenied, ValidationFailed
from governance.services.jobs import apply_priority_change
from governance.services.kit import is_int, lock_job


def exception_snapshot(exc: PriorityException) -> dict[str, Any]:
    """The exception's API fields as JSON, for audit ``before``/``after``."""
    return audit.fields_of(
        exc,
        "id",
        "team",
        "job",
        "share",
        "priority",
        "state",
        "requester",
        "expires_at",
        "decided_by",
        "decision_note",
        "previous_priority",
    )


def _links(exc: PriorityException) -> dict[str, int | None]:
    """Audit links: the team, the share (the job's share for a job target), job, queue."""
    if exc.job_id is not None:
        job = exc.job
        assert job is not None
        return {
            "team_id": exc.team_id,
            "share_id": job.share_id,
            "job_id": job.pk,
            "queue_id": job.queue_id,
        }
    share = exc.share
    assert share is not None
    return {
        "team_id": exc.team_id,
        "share_id": share.pk,
        "job_id": None,
        "queue_id": share.queue_id,
    }


def _raised_subject(
    errors: Errors, team_obj: Team, job_id: Any, share_id: Any
) -> tuple[Job | None, Share | None]:
    """Exactly one of an active job or a share of ``team_obj``, the exception raises."""
    job_obj: Job | None = None
    share_obj: Share | None = None
    if (job_id is None) == (share_id is None):
        message = "Give exactly one of job or share."
        errors.add("job", message)
        errors.add("share", message)
    elif job_id is not None:
        job_obj = (
            Job.objects.select_related("share").filter(pk=job_id).first()
            if limits.valid_id(job_id)
            else None
        )
        if job_obj is None:
            errors.add("job", f"No job with id {job_id}.")
        elif job_obj.share.team_id != team_obj.pk:
            errors.add("team", f"Job {job_obj.pk} does not belong to team {team_obj.name}.")
        elif job_obj.state not in ACTIVE_STATES:
            errors.add(
                "job", f"Job {job_obj.pk} is {job_obj.state}; only active jobs can be raised."
            )
    else:
        share_obj = (
            Share.objects.filter(pk=cast(int, share_id)).first()
            if limits.valid_id(share_id)
            else None
        )
        if share_obj is None:
            errors.add("share", f"No share with id {share_id}.")
        elif share_obj.team_id != team_obj.pk:
            errors.add("team", f"Share {share_obj} does not belong to team {team_obj.name}.")
    return job_obj, share_obj


def _check_expiry(errors: Errors, expires_at: datetime | None, now: datetime) -> None:
    """An exception expires in the future, at most ``MAX_EXCEPTION_DAYS`` from now."""
    if expires_at is None:
        errors.add("expires_at", "An expiry is required.")
    elif expires_at <= now:
        errors.add("expires_at", "The expiry must be in the future.")
    elif expires_at > now + timedelta(days=MAX_EXCEPTION_DAYS):
        errors.add(
            "expires_at", f"An exception may last at most {MAX_EXCEPTION_DAYS} days from now."
        )


def exception_file(
    *,
    actor: AnyUser,
    team: Team | int,
    priority: int,
    justification: str,
    expires_at: datetime | None,
    job: Job | int | None = None,
    share: Share | int | None = None,
    wanted_by: datetime | None = None,
) -> PriorityException:
    """File an exception request: only a lead of ``team``, for that team's job or share.

    The priority must be above what the requester may already use for the team (filing
    for a usable priority is pointless), and the exception must expire in the future and
    at most 30 days from now.
    """
    team_id = team.pk if isinstance(team, Team) else team
    with transaction.atomic():
        team_obj = Team.objects.filter(pk=team_id).first() if limits.valid_id(team_id) else None
        if team_obj is None:
            raise ValidationFailed({"team": [f"No team with id {team_id}."]})
        if not roles.is_lead_of(actor, team_obj):
            raise PermissionDenied(
                {"team": [f"Only leads of team {team_obj.name} may file exceptions for it."]}
            )
        errors = Errors()
        job_obj, share_obj = _raised_subject(
            errors,
            team_obj,
            job.pk if isinstance(job, Job) else job,
            share.pk if isinstance(share, Share) else share,
        )
        if not is_int(priority) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            errors.add(
                "priority",
                f"The priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}.",
            )
        else:
            highest = priority_selectors.max_usable_priority(actor, team_obj)
            if highest is not None and priority <= highest:
                errors.add(
                    "priority",
                    f"You may already use priority {priority} (your highest is {highest}); "
                    "an exception is only needed above it.",
                )
        if not isinstance(justification, str) or not justification.strip():
            errors.add("justification", "A justification is required.")
        now = timezone.now()
        _check_expiry(errors, expires_at, now)
        errors.raise_if_any()
        assert expires_at is not None

        exc = PriorityException.objects.create(
            requester=cast(Any, actor),
            team=team_obj,
            job=job_obj,
            share=share_obj,
            priority=priority,
            justification=justification.strip(),
            wanted_by=wanted_by,
            expires_at=expires_at,
            state=ExceptionState.PENDING,
        )
        audit.record(
            event_type=AuditEvent.EXCEPTION_FILED,
            actor=actor,
            subject=exc,
            before=None,
            after=exception_snapshot(exc),
            reason=exc.justification,
            at=now,
            **_links(exc),
        )
        notifications.exception_filed(exc, actor)
    return exc


def _lock(exception: PriorityException | int) -> PriorityException:
    exc_id = exception.pk if isinstance(exception, PriorityException) else exception
    found = (
        PriorityException.objects.select_for_update(of=("self",))
        .select_related("job", "job__share", "share", "team")
        .filter(pk=exc_id)
        .first()
    )
    if found is None:
        raise NotFound({"detail": [f"No exception with id {exc_id}."]})
    return found


def _check_decidable(actor: AnyUser, exc: PriorityException, now: datetime) -> None:
    if not roles.can_decide_exceptions(actor):
        raise PermissionDenied({"detail": ["Only reviewers and admins decide exceptions."]})
    if actor.is_authenticated and exc.requester_id == actor.pk:
        raise PermissionDenied(
            {"detail": ["You filed this exception; someone else must decide it."]}
        )
    if exc.state != ExceptionState.PENDING:
        raise ValidationFailed(
            {"state": [f"Only pending exceptions can be decided; this one is {exc.state}."]}
        )
    if exc.expires_at <= now:
        raise ValidationFailed(
            {"state": ["This exception has passed its expiry; it can no longer be decided."]}
        )


def _close_moot(exc: PriorityException, job: Job, now: datetime) -> None:
    """Close a pending exception whose job has ended (the system acts): there is nothing
    left to raise, and neither "approved" nor "rejected" would say what happened."""
    before = exception_snapshot(exc)
    exc.state = ExceptionState.CLOSED
    exc.save(update_fields=["state"])
    audit.record(
        event_type=AuditEvent.EXCEPTION_CLOSED,
        actor=None,
        subject=exc,
        before=before,
        after=exception_snapshot(exc),
        reason=f"job {job.pk} ended ({job.get_state_display().lower()}) before a decision; "
        "nothing left to raise",
        at=now,
        **_links(exc),
    )


def _moot_refusal(exc: PriorityException, job: Job) -> ValidationFailed:
    return ValidationFailed(
        {
            "state": [
                f"Job {job.pk} has ended ({job.get_state_display().lower()}), so there is "
                f"nothing left to raise: exception {exc.pk} is now closed, neither approved "
                "nor rejected."
            ]
        }
    )


def _decide_or_close(actor: AnyUser, exception: PriorityException | int) -> None:
    """Before deciding: a pending job exception whose job has ended is closed as moot
    (committed, with its audit entry) and the decision refused, saying so."""
    with transaction.atomic():
        exc = _lock(exception)
        _check_decidable(actor, exc, timezone.now())
        if exc.job_id is None:
            return
        job = lock_job(exc.job_id, "share")
        if job.state in ACTIVE_STATES:
            return
        _close_moot(exc, job, timezone.now())
    raise _moot_refusal(exc, job)


def exception_close_moot(*, now: datetime | None = None) -> int:
    """Close every pending job exception whose job has ended (run with the expiry by the
    scheduler's periodic pass). Returns how many were closed; idempotent."""
    now = now or timezone.now()
    closed = 0
    with transaction.atomic():
        moot = (
            PriorityException.objects.select_for_update(of=("self",), skip_locked=True)
            .select_related("job", "job__share")
            .filter(state=ExceptionState.PENDING, job__isnull=False)
            .exclude(job__state__in=ACTIVE_STATES)
            .order_by("id")
        )
        for exc in moot:
            assert exc.job is not None
            _close_moot(exc, exc.job, now)
            closed += 1
    return closed


def exception_approve(
    *, actor: AnyUser, exception: PriorityException | int, note: str = ""
) -> PriorityException:
    """Approve a pending exception (reviewers and admins, never the requester).

    A job exception raises the job to the requested priority at once (its previous
    priority is kept for the revert); a share exception only authorises later changes.
    A job exception whose job has ended is closed instead, and the approval refused.
    """
    _decide_or_close(actor, exception)
    with transaction.atomic():
        exc = _lock(exception)
        now = timezone.now()
        _check_decidable(actor, exc, now)
        job: Job | None = None
        if exc.job_id is not None:
            job = lock_job(exc.job_id, "share")
            if job.state not in ACTIVE_STATES:  # ended since the check above
                raise _moot_refusal(exc, job)
        before = exception_snapshot(exc)
        exc.state = ExceptionState.APPROVED
        exc.decided_by_id = actor.pk
        exc.decided_at = now
        exc.decision_note = note
        if job is not None:
            exc.previous_priority = job.priority
        exc.save()
        audit.record(
            event_type=AuditEvent.EXCEPTION_APPROVED,
            actor=actor,
            subject=exc,
            before=before,
            after=exception_snapshot(exc),
            reason=note,
            at=now,
            **_links(exc),
        )
        hooks.queue_changed(_links(exc)["queue_id"] or 0)
        if job is not None and job.priority != exc.priority:
            apply_priority_change(
                actor=actor,
                job=job,
                priority=exc.priority,
                reason=note,
                message=f"Priority raised from {job.priority} to {exc.priority}: exception "
                f"{exc.pk} approved by {actor.get_username()}.",
                at=now,
            )
        notifications.exception_decided(exc, actor)
    return exc


def exception_reject(
    *, actor: AnyUser, exception: PriorityException | int, note: str = ""
) -> PriorityException:
    """Reject a pending exception (reviewers and admins, never the requester). A job
    exception whose job has ended is closed instead: rejecting would misstate why."""
    _decide_or_close(actor, exception)
    with transaction.atomic():
        exc = _lock(exception)
        now = timezone.now()
        _check_decidable(actor, exc, now)
        before = exception_snapshot(exc)
        exc.state = ExceptionState.REJECTED
        exc.decided_by_id = actor.pk
        exc.decided_at = now
        exc.decision_note = note
        exc.save()
        audit.record(
            event_type=AuditEvent.EXCEPTION_REJECTED,
            actor=actor,
            subject=exc,
            before=before,
            after=exception_snapshot(exc),
            reason=note,
            at=now,
            **_links(exc),
        )
        notifications.exception_decided(exc, actor)
    return exc


def _revert_job(
    *, actor: AnyUser | None, exc: PriorityException, at: datetime, why: str, reason: str
) -> None:
    """Give a job exception's job its previous priority back, if nobody changed it since."""
    if exc.job_id is None or exc.previous_priority is None:
        return
    job = lock_job(exc.job_id, "share")
    if job.state not in ACTIVE_STATES or job.priority != exc.priority:
        return
    if job.priority == exc.previous_priority:
        return
    apply_priority_change(
        actor=actor,
        job=job,
        priority=exc.previous_priority,
        reason=reason,
        message=f"Priority back from {job.priority} to {exc.previous_priority}: "
        f"exception {exc.pk} {why}.",
        at=at,
    )


def exception_withdraw(
    *, actor: AnyUser, exception: PriorityException | int, note: str = ""
) -> PriorityException:
    """Withdraw a pending or approved exception: its requester or an admin.

    Withdrawing an approved job exception gives the job its previous priority back.
    """
    with transaction.atomic():
        exc = _lock(exception)
        is_requester = actor.is_authenticated and exc.requester_id == actor.pk
        if not (is_requester or roles.is_admin(actor)):
            raise PermissionDenied(
                {"detail": ["Only the requester or an admin may withdraw an exception."]}
            )
        if exc.state not in (ExceptionState.PENDING, ExceptionState.APPROVED):
            raise ValidationFailed(
                {
                    "state": [
                        f"Only pending or approved exceptions can be withdrawn; this one is "
                        f"{exc.state}."
                    ]
                }
            )
        now = timezone.now()
        before = exception_snapshot(exc)
        was_approved = exc.state == ExceptionState.APPROVED
        exc.state = ExceptionState.WITHDRAWN
        exc.save(update_fields=["state"])
        audit.record(
            event_type=AuditEvent.EXCEPTION_WITHDRAWN,
            actor=actor,
            subject=exc,
            before=before,
            after=exception_snapshot(exc),
            reason=note,
            at=now,
            **_links(exc),
        )
        if was_approved:
            hooks.queue_changed(_links(exc)["queue_id"] or 0)
            _revert_job(actor=actor, exc=exc, at=now, why="withdrawn", reason=note)
    return exc


def exception_expire_due(*, now: datetime | None = None) -> int:
    """Expire every pending or approved exception whose expiry has come (the system acts).

    Approved job exceptions give their job its previous priority back unless it was
    changed since the approval. Returns how many exceptions expired. Idempotent: a
    second call at the same instant finds nothing to do.
    """
    now = now or timezone.now()
    expired = 0
    with transaction.atomic():
        due = (
            PriorityException.objects.select_for_update(of=("self",), skip_locked=True)
            .select_related("job", "share")
            .filter(
                state__in=(ExceptionState.PENDING, ExceptionState.APPROVED),
                expires_at__lte=now,
            )
            .order_by("expires_at", "id")
        )
        for exc in due:
            before = exception_snapshot(exc)
            was_approved = exc.state == ExceptionState.APPROVED
            exc.state = ExceptionState.EXPIRED
            exc.save(update_fields=["state"])
            audit.record(
                event_type=AuditEvent.EXCEPTION_EXPIRED,
                actor=None,
                subject=exc,
                before=before,
                after=exception_snapshot(exc),
                reason=f"expired at {exc.expires_at.isoformat()}",
                at=now,
                **_links(exc),
            )
            if was_approved:
                hooks.queue_changed(_links(exc)["queue_id"] or 0)
                _revert_job(actor=None, exc=exc, at=now, why="expired", reason="exception expired")
            expired += 1
    return expired
