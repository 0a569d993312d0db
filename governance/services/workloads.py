"""Workloads (docs/workloads.md): a team's leads and admins create and change them; their
recovery status changes with evidence (a resumed run's outcome), audited and told to the
team's leads.

Each function validates its whole input (errors keyed by the field, naming the rule) and
writes the change and its audit entry in one transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from django.db import IntegrityError, transaction
from django.utils import timezone

from governance import roles
from governance.models import (
    AuditEvent,
    Interruption,
    Job,
    JobState,
    RecoveryChange,
    RecoveryStatus,
    Team,
    Workload,
)
from governance.roles import AnyUser
from governance.services import audit, limits, notifications
from governance.services.errors import Errors, NotFound, PermissionDenied, ValidationFailed
from governance.services.kit import lock_job

NAME_MAX_LENGTH = 100
TEXT_MAX_LENGTH = 4000
NOTE_MAX_LENGTH = 2000
NAME_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
EDITABLE = ("name", "interruption", "recovery_assumptions")


def workload_snapshot(workload: Workload) -> dict[str, Any]:
    """The workload's API fields as JSON, for audit ``before``/``after``."""
    return audit.fields_of(
        workload,
        "id",
        "team",
        "name",
        "interruption",
        "recovery_assumptions",
        "recovery_status",
    )


def may_edit(actor: AnyUser, team_id: int) -> bool:
    """A team's leads and admins create and change its workloads."""
    return roles.is_admin(actor) or roles.is_lead_of(actor, team_id)


def _require_editor(actor: AnyUser, team: Team) -> None:
    if not may_edit(actor, team.pk):
        raise PermissionDenied(
            {"team": [f"Only leads of team {team.name} and admins may change its workloads."]}
        )


def _clean_name(errors: Errors, name: Any, team: Team | None, *, exclude: int | None) -> str:
    clean = name.strip() if isinstance(name, str) else ""
    if not clean:
        errors.add("name", "A workload needs a name, e.g. vision/detector-finetune.")
    elif len(clean) > NAME_MAX_LENGTH:
        errors.add("name", f"At most {NAME_MAX_LENGTH} characters.")
    elif not NAME_RULE.match(clean):
        errors.add(
            "name",
            "Use letters, digits and . _ - / only, starting with a letter or digit "
            "(e.g. vision/detector-finetune).",
        )
    elif (
        team is not None
        and Workload.objects.filter(team=team, name=clean).exclude(pk=exclude or 0).exists()
    ):
        errors.add("name", f"Team {team.name} already has a workload named {clean!r}.")
    return clean


def _clean_interruption(errors: Errors, value: Any) -> str:
    if value not in Interruption.values:
        errors.add(
            "interruption",
            f"The interruption class must be one of: {', '.join(Interruption.values)}.",
        )
        return Interruption.TOLERANT
    return cast(str, value)


def _clean_text(errors: Errors, field: str, value: Any, maximum: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.add(field, "Must be text.")
        return ""
    if len(value) > maximum:
        errors.add(field, f"At most {maximum} characters.")
    return value.strip()


def _audit(
    event: AuditEvent,
    actor: AnyUser | None,
    workload: Workload,
    before: Any,
    *,
    reason: str = "",
    job_id: int | None = None,
    at: datetime | None = None,
) -> None:
    audit.record(
        event_type=event,
        actor=actor,
        subject=workload,
        before=before,
        after=workload_snapshot(workload),
        reason=reason,
        team_id=workload.team_id,
        job_id=job_id,
        at=at,
    )


def workload_create(
    *,
    actor: AnyUser,
    team: Team | int | None,
    name: Any,
    interruption: Any = Interruption.TOLERANT,
    recovery_assumptions: Any = "",
) -> Workload:
    """Create a workload of ``team`` (its leads, admins). Its recovery starts
    ``unverified``. Audited as WORKLOAD_CREATED."""
    team_id = team.pk if isinstance(team, Team) else team
    team_obj = (
        Team.objects.filter(pk=cast(int, team_id)).first() if limits.valid_id(team_id) else None
    )
    if team_obj is None:
        raise ValidationFailed({"team": [f"No team with id {team_id}."]})
    _require_editor(actor, team_obj)
    errors = Errors()
    with transaction.atomic():
        clean_name = _clean_name(errors, name, team_obj, exclude=None)
        clean_class = _clean_interruption(errors, interruption)
        assumptions = _clean_text(
            errors, "recovery_assumptions", recovery_assumptions, TEXT_MAX_LENGTH
        )
        errors.raise_if_any()
        try:
            with transaction.atomic():
                workload = Workload.objects.create(
                    team=team_obj,
                    name=clean_name,
                    interruption=clean_class,
                    recovery_assumptions=assumptions,
                    created_by=cast(Any, actor) if actor.is_authenticated else None,
                )
        except IntegrityError as exc:
            raise ValidationFailed({"name": [f"{clean_name!r} already exists."]}) from exc
        _audit(AuditEvent.WORKLOAD_CREATED, actor, workload, None)
    return workload


def _lock(workload: Workload | int) -> Workload:
    workload_id = workload.pk if isinstance(workload, Workload) else workload
    found = (
        Workload.objects.select_for_update(of=("self",))
        .select_related("team")
        .filter(pk=workload_id)
        .first()
        if limits.valid_id(workload_id)
        else None
    )
    if found is None:
        raise NotFound({"detail": [f"No workload with id {workload_id}."]})
    return found


def workload_update(
    *, actor: AnyUser, workload: Workload | int, changes: Mapping[str, Any]
) -> Workload:
    """Change a workload's name, interruption class or recovery assumptions (its team's
    leads, admins). A new class applies to jobs submitted from then on. The recovery
    status changes only with evidence (``recovery_record``). Audited as WORKLOAD_UPDATED."""
    with transaction.atomic():
        locked = _lock(workload)
        _require_editor(actor, locked.team)
        unknown = sorted(set(changes) - set(EDITABLE))
        if unknown:
            raise ValidationFailed(
                {
                    field: [
                        "Only name, interruption and recovery_assumptions can change; the "
                        "recovery status follows resumed runs' outcomes."
                    ]
                    for field in unknown
                }
            )
        errors = Errors()
        before = workload_snapshot(locked)
        if "name" in changes:
            locked.name = _clean_name(errors, changes["name"], locked.team, exclude=locked.pk)
        if "interruption" in changes:
            locked.interruption = _clean_interruption(errors, changes["interruption"])
        if "recovery_assumptions" in changes:
            locked.recovery_assumptions = _clean_text(
                errors, "recovery_assumptions", changes["recovery_assumptions"], TEXT_MAX_LENGTH
            )
        errors.raise_if_any()
        if workload_snapshot(locked) == before:
            return locked
        locked.save()
        _audit(AuditEvent.WORKLOAD_UPDATED, actor, locked, before)
    return locked


def clean_job_workload(errors: Errors, workload: Any, team_id: int) -> Workload | None:
    """The workload a job names (an id or a Workload), which must be of the job's share's
    team; None when it names none. Errors go to the ``workload`` field."""
    if workload is None or workload == "":
        return None
    workload_id = workload.pk if isinstance(workload, Workload) else workload
    found = (
        Workload.objects.filter(pk=cast(int, workload_id)).first()
        if limits.valid_id(workload_id)
        else None
    )
    if found is None:
        errors.add("workload", f"No workload with id {workload_id}.")
        return None
    if found.team_id != team_id:
        errors.add(
            "workload",
            f"Workload {found.name!r} belongs to another team; a job names a workload of "
            "its share's team.",
        )
        return None
    return found


def recovery_record(
    *,
    workload: Workload | int,
    after: RecoveryStatus,
    job: Job | None,
    note: str = "",
    actor: AnyUser | None = None,
    at: datetime | None = None,
) -> Workload:
    """Set a workload's recovery status to ``after`` with ``job`` as evidence: a history
    row, an audit entry (WORKLOAD_RECOVERY_CHANGED) and a notification to the team's
    leads. Called in the transaction of whatever established the evidence. A run that
    confirms the status it already has adds a history row but tells nobody."""
    at = at or timezone.now()
    locked = _lock(workload)
    before = workload_snapshot(locked)
    previous = locked.recovery_status
    RecoveryChange.objects.create(
        workload=locked,
        at=at,
        before=previous,
        after=after,
        evidence_job=job,
        note=note[:NOTE_MAX_LENGTH],
        actor=cast(Any, actor) if actor is not None and actor.is_authenticated else None,
    )
    if previous == after:
        return locked
    locked.recovery_status = after
    locked.save(update_fields=["recovery_status", "updated_at"])
    evidence = f" (evidence: job {job.pk})" if job is not None else ""
    _audit(
        AuditEvent.WORKLOAD_RECOVERY_CHANGED,
        actor,
        locked,
        before,
        reason=(note or f"recovery {previous} -> {after}") + evidence,
        job_id=job.pk if job is not None else None,
        at=at,
    )
    notifications.recovery_changed(locked, job=job, note=note, actor=actor, at=at)
    return locked


def resumed(job: Job) -> bool:
    """Whether the job's last run resumed after a preemption: only such a run says
    anything about its workload's recovery."""
    return job.preemptions > 0


def run_outcome(
    job: Job,
    *,
    output_valid: bool | None,
    failed: bool = False,
    actor: AnyUser | None = None,
    note: str = "",
    at: datetime | None = None,
) -> None:
    """A run of ``job`` ended (in the caller's transaction): when it had resumed after a
    preemption and names a workload, a failure or an invalid output sets the workload
    ``failed`` and a valid output verifies it, with the job as evidence. A completion
    without a verdict on its output waits for a lead (``job_output_judge``)."""
    if job.workload_id is None or not resumed(job):
        return
    if failed:
        recovery_record(
            workload=job.workload_id,
            after=RecoveryStatus.FAILED,
            job=job,
            note=note or "The resumed run failed.",
            actor=actor,
            at=at,
        )
    elif output_valid is not None:
        recovery_record(
            workload=job.workload_id,
            after=RecoveryStatus.VERIFIED if output_valid else RecoveryStatus.FAILED,
            job=job,
            note=note
            or (
                "The resumed run completed; the executor reported its output "
                + ("valid." if output_valid else "invalid.")
            ),
            actor=actor,
            at=at,
        )


def may_judge(actor: AnyUser, job: Job) -> bool:
    """Leads of the job's team and admins confirm or reject a resumed run's output."""
    return roles.is_admin(actor) or roles.is_lead_of(actor, job.share.team_id)


def job_output_judge(*, actor: AnyUser, job: Job | int, valid: Any, note: Any = "") -> Job:
    """A lead confirms (``valid`` true) or rejects a resumed run's output: the job must
    have succeeded after at least one preemption and name a workload, whose recovery
    becomes ``verified`` or ``failed`` with the job as evidence. Audited as
    JOB_OUTPUT_JUDGED (and the workload's change as WORKLOAD_RECOVERY_CHANGED)."""
    with transaction.atomic():
        locked = lock_job(job, "share__team")
        if not may_judge(actor, locked):
            raise PermissionDenied(
                {
                    "valid": [
                        f"Only leads of team {locked.share.team.name} and admins may judge "
                        "this job's output."
                    ]
                }
            )
        errors = Errors()
        if not isinstance(valid, bool):
            errors.add("valid", "Say true (the output is valid) or false (it is not).")
        clean_note = _clean_text(errors, "note", note, NOTE_MAX_LENGTH)
        if locked.state != JobState.SUCCEEDED:
            errors.add(
                "state",
                f"Job {locked.pk} is {locked.state}: only a completed run's output is judged.",
            )
        elif not resumed(locked):
            errors.add(
                "state",
                f"Job {locked.pk} was never preempted: its output says nothing about recovery.",
            )
        if locked.workload_id is None:
            errors.add("workload", f"Job {locked.pk} names no workload whose recovery it shows.")
        errors.raise_if_any()
        now = timezone.now()
        before = {"output_valid": locked.output_valid}
        locked.output_valid = cast(bool, valid)
        locked.save(update_fields=["output_valid"])
        audit.record_job(
            event_type=AuditEvent.JOB_OUTPUT_JUDGED,
            actor=actor,
            job=locked,
            before=before,
            after={"output_valid": locked.output_valid, "workload": locked.workload_id},
            reason=clean_note,
            at=now,
        )
        verdict = "valid" if valid else "invalid"
        run_outcome(
            locked,
            output_valid=cast(bool, valid),
            actor=actor,
            note=clean_note or f"{actor.get_username()} marked the resumed run's output {verdict}.",
            at=now,
        )
    return locked
