"""Certified configurations (docs/workloads.md#certified-configurations): a lead of the
workload's team proposes a configuration with its benchmark record; a reviewer who did
not propose it certifies or rejects it with a note; it holds for CERTIFICATION_VALID_DAYS
and may be revoked with a reason. The team's leads are reminded once before it expires,
and told once when its runs start to drift from the benchmark.

Each function validates its whole input (errors keyed by the field, naming the rule) and
writes the change and its audit entry in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from governance import roles
from governance.models import (
    AuditEvent,
    CapacityPlan,
    Certification,
    CertificationState,
    InstanceType,
    NotificationKind,
    Workload,
)
from governance.models.certifications import ConfigurationKey
from governance.roles import AnyUser
from governance.services import audit, limits, notifications
from governance.services.errors import Errors, NotFound, PermissionDenied, ValidationFailed
from governance.services.kit import is_int

NOTE_MAX_LENGTH = 2000
ENVIRONMENT_MAX_LENGTH = 300
PERCENT_MAX = Decimal(100)


def certification_snapshot(cert: Certification) -> dict[str, Any]:
    """The certification's API fields as JSON, for audit ``before``/``after``."""
    return {
        "id": cert.pk,
        "workload": cert.workload_id,
        "instance_type": cert.key[1] if cert.key[0] == "type" else None,
        "plan": cert.key[1] if cert.key[0] == "plan" else None,
        "count": cert.count,
        "runtime": cert.runtime,
        "converged": cert.converged,
        "utilization": str(cert.utilization),
        "failure_rate": str(cert.failure_rate),
        "output_valid": cert.output_valid,
        "environment": cert.environment,
        "notes": cert.notes,
        "state": cert.state,
        "expires_at": cert.expires_at.isoformat() if cert.expires_at else None,
    }


def may_propose(actor: AnyUser, team_id: int) -> bool:
    """A team's leads (and admins) propose configurations of its workloads."""
    return roles.is_admin(actor) or roles.is_lead_of(actor, team_id)


def may_decide(actor: AnyUser, cert: Certification) -> bool:
    """Reviewers and admins certify or reject, never the configuration's proposer."""
    return roles.can_decide_exceptions(actor) and cert.proposed_by_id != actor.pk


def may_revoke(actor: AnyUser, cert: Certification) -> bool:
    """Reviewers, admins and the workload team's leads withdraw a certification."""
    return roles.can_decide_exceptions(actor) or roles.is_lead_of(actor, cert.workload.team_id)


def _audit(
    event: AuditEvent, actor: AnyUser | None, cert: Certification, before: Any, reason: str = ""
) -> None:
    audit.record(
        event_type=event,
        actor=actor,
        subject=cert,
        before=before,
        after=certification_snapshot(cert),
        reason=reason,
        team_id=cert.workload.team_id,
    )


def cents(value: Any, maximum: Decimal) -> Decimal | None:
    """``value`` as a Decimal from 0 to ``maximum`` with at most 2 decimals, else None
    (a bool, text that is no number, NaN or infinity included)."""
    if not isinstance(value, Decimal | int | float | str) or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    if (
        not number.is_finite()
        or not Decimal(0) <= number <= maximum
        or number != number.quantize(Decimal("0.01"))
    ):
        return None
    return number


def _percent(errors: Errors, field: str, value: Any) -> Decimal:
    number = cents(value, PERCENT_MAX)
    if number is None:
        errors.add(field, "A percentage from 0 to 100, with at most 2 decimals.")
        return Decimal(0)
    return number


def _flag(errors: Errors, field: str, value: Any, words: str) -> bool:
    if not isinstance(value, bool):
        errors.add(field, f"Say true or false: {words}.")
        return False
    return value


def _text(errors: Errors, field: str, value: Any, maximum: int, *, required: str = "") -> str:
    clean = value.strip() if isinstance(value, str) else ""
    if value is not None and not isinstance(value, str):
        errors.add(field, "Must be text.")
    elif len(clean) > maximum:
        errors.add(field, f"At most {maximum} characters.")
    elif required and not clean:
        errors.add(field, required)
    return clean


def _configuration(
    errors: Errors, workload: Workload, instance_type: Any, plan: Any, count: Any
) -> tuple[InstanceType | None, CapacityPlan | None]:
    """The type or the plan of the team's shares the configuration names (one of both)."""
    if not is_int(count) or not 1 <= count <= limits.MAX_INSTANCES:
        errors.add("count", f"The count must be a whole number from 1 to {limits.MAX_INSTANCES}.")
    given_type = instance_type not in (None, "")
    given_plan = plan not in (None, "")
    if given_type == given_plan:
        errors.add(
            "instance_type", "Name an instance type, or a capacity plan of the team, not both."
        )
        return None, None
    if given_type:
        found = (
            InstanceType.objects.filter(name=instance_type).first()
            if isinstance(instance_type, str) and len(instance_type) <= 64
            else None
        )
        if found is None:
            errors.add("instance_type", f"No instance type named {str(instance_type)[:64]!r}.")
        return found, None
    found_plan = (
        CapacityPlan.objects.filter(name=plan, share__team_id=workload.team_id).first()
        if isinstance(plan, str) and len(plan) <= 100
        else None
    )
    if found_plan is None:
        errors.add("plan", f"No capacity plan named {str(plan)[:100]!r} of team {workload.team}.")
    return None, found_plan


def _proposed_for(actor: AnyUser, workload_id: Any) -> Workload:
    """The workload a configuration is proposed for, when the actor may propose one."""
    found = (
        Workload.objects.select_related("team").filter(pk=cast(int, workload_id)).first()
        if limits.valid_id(workload_id)
        else None
    )
    if found is None:
        raise ValidationFailed({"workload": [f"No workload with id {workload_id}."]})
    if not may_propose(actor, found.team_id):
        raise PermissionDenied(
            {
                "workload": [
                    f"Only leads of team {found.team.name} (and admins) propose configurations "
                    "of its workloads."
                ]
            }
        )
    return found


def certification_propose(
    *,
    actor: AnyUser,
    workload: Workload | int | None,
    count: Any,
    runtime: Any,
    converged: Any,
    utilization: Any,
    failure_rate: Any,
    output_valid: Any,
    instance_type: Any = None,
    plan: Any = None,
    environment: Any = "",
    notes: Any = "",
) -> Certification:
    """A lead proposes a configuration of one of the team's workloads with the benchmark
    of its reference run (``runtime`` in seconds, ``utilization`` and ``failure_rate`` in
    percent). Audited as CERTIFICATION_PROPOSED; reviewers are told."""
    found = _proposed_for(actor, workload.pk if isinstance(workload, Workload) else workload)
    errors = Errors()
    type_obj, plan_obj = _configuration(errors, found, instance_type, plan, count)
    limits.check_int(
        errors,
        "runtime",
        runtime,
        minimum=1,
        maximum=limits.MAX_SECONDS,
        nullable=False,
        label="the reference run's time (seconds)",
    )
    clean = {
        "converged": _flag(errors, "converged", converged, "the reference run converged"),
        "output_valid": _flag(errors, "output_valid", output_valid, "its output was valid"),
        "utilization": _percent(errors, "utilization", utilization),
        "failure_rate": _percent(errors, "failure_rate", failure_rate),
        "environment": _text(errors, "environment", environment, ENVIRONMENT_MAX_LENGTH),
        "notes": _text(errors, "notes", notes, NOTE_MAX_LENGTH),
    }
    with transaction.atomic():
        open_twin = Certification.objects.filter(
            workload=found,
            instance_type=type_obj,
            plan=plan_obj,
            count=count if is_int(count) else 0,
            state=CertificationState.PROPOSED,
        )
        if (type_obj or plan_obj) and open_twin.exists():
            errors.add("count", "This configuration is already proposed and waits for a reviewer.")
        errors.raise_if_any()
        now = timezone.now()
        cert = Certification.objects.create(
            workload=found,
            instance_type=type_obj,
            plan=plan_obj,
            count=count,
            runtime=runtime,
            proposed_by=cast(Any, actor) if actor.is_authenticated else None,
            proposed_at=now,
            **clean,
        )
        _audit(AuditEvent.CERTIFICATION_PROPOSED, actor, cert, None)
        notifications.tell(
            kind=NotificationKind.CERTIFICATION_NEEDS_REVIEW,
            key=f"certification.proposed:{cert.pk}",
            recipients=notifications.reviewers(),
            title=f"Certify {cert.configuration} for workload {found.name} "
            f"(team {found.team.name})?",
            body=str(clean["notes"]),
            url=_url(found),
            exclude=actor,
            at=now,
        )
    return cert


def _url(workload: Workload) -> str:
    return reverse("web:workload", args=[workload.pk]) + "#configurations"


def _tell_leads(
    cert: Certification,
    kind: NotificationKind,
    what: str,
    *,
    key: str,
    at: datetime,
    body: str = "",
    actor: AnyUser | None = None,
) -> None:
    """Tell the workload team's leads (and the proposer) that ``cert`` ``what``."""
    proposer = {cert.proposed_by_id} if cert.proposed_by_id else set()
    notifications.tell(
        kind=kind,
        key=key,
        recipients=notifications.team_people(cert.workload.team_id, leads_only=True) | proposer,
        title=f"{cert.configuration} for workload {cert.workload.name} {what}",
        body=body,
        url=_url(cert.workload),
        exclude=actor,
        at=at,
    )


def _lock(cert: Certification | int) -> Certification:
    cert_id = cert.pk if isinstance(cert, Certification) else cert
    found = (
        Certification.objects.select_for_update(of=("self",))
        .select_related("workload__team", "instance_type", "plan")
        .filter(pk=cert_id)
        .first()
        if limits.valid_id(cert_id)
        else None
    )
    if found is None:
        raise NotFound({"detail": [f"No certification with id {cert_id}."]})
    return found


def certification_decide(
    *, actor: AnyUser, certification: Certification | int, certify: Any, note: Any
) -> Certification:
    """A reviewer (or admin) who did not propose it certifies (``certify`` true, it then
    holds CERTIFICATION_VALID_DAYS) or rejects a proposed configuration, with a note.
    Audited as CERTIFICATION_CERTIFIED or CERTIFICATION_REJECTED; the team's leads hear."""
    with transaction.atomic():
        cert = _lock(certification)
        if not roles.can_decide_exceptions(actor):
            raise PermissionDenied(
                {"detail": ["Only reviewers and admins certify or reject configurations."]}
            )
        if cert.proposed_by_id == actor.pk:
            raise PermissionDenied(
                {"detail": ["You proposed this configuration: another reviewer decides it."]}
            )
        errors = Errors()
        if cert.state != CertificationState.PROPOSED:
            errors.add(
                "state", f"This configuration is {cert.state}: only a proposed one is decided."
            )
        certify_flag = _flag(errors, "certify", certify, "certify (true) or reject (false)")
        clean_note = _text(
            errors,
            "note",
            note,
            NOTE_MAX_LENGTH,
            required="Say why: what in the benchmark you relied on, or what is missing.",
        )
        errors.raise_if_any()
        before = certification_snapshot(cert)
        now = timezone.now()
        cert.state = CertificationState.CERTIFIED if certify_flag else CertificationState.REJECTED
        cert.decided_by = cast(Any, actor)
        cert.decided_at = now
        cert.decision_note = clean_note
        if certify_flag:
            cert.expires_at = now + timedelta(days=settings.CERTIFICATION_VALID_DAYS)
        cert.save()
        _audit(
            AuditEvent.CERTIFICATION_CERTIFIED
            if certify_flag
            else AuditEvent.CERTIFICATION_REJECTED,
            actor,
            cert,
            before,
            clean_note,
        )
        _tell_leads(
            cert,
            NotificationKind.CERTIFICATION_DECIDED,
            f"was {cert.state} by {actor.get_username()}",
            key=f"certification.{cert.state}:{cert.pk}",
            body=clean_note,
            actor=actor,
            at=now,
        )
    return cert


def certification_revoke(
    *, actor: AnyUser, certification: Certification | int, reason: Any
) -> Certification:
    """Withdraw a certified configuration (reviewers, admins, the team's leads), with a
    reason; templates then skip it. Audited as CERTIFICATION_REVOKED."""
    with transaction.atomic():
        cert = _lock(certification)
        if not may_revoke(actor, cert):
            raise PermissionDenied(
                {
                    "detail": [
                        f"Only reviewers, admins and leads of team {cert.workload.team.name} "
                        "revoke its certifications."
                    ]
                }
            )
        errors = Errors()
        if cert.state != CertificationState.CERTIFIED:
            errors.add(
                "state", f"This configuration is {cert.state}: only a certified one is revoked."
            )
        clean_reason = _text(
            errors,
            "reason",
            reason,
            NOTE_MAX_LENGTH,
            required="Say why it no longer holds (a new image, a changed data path...).",
        )
        errors.raise_if_any()
        before = certification_snapshot(cert)
        now = timezone.now()
        cert.state = CertificationState.REVOKED
        cert.revoked_by = cast(Any, actor)
        cert.revoked_at = now
        cert.revoke_reason = clean_reason
        cert.save()
        _audit(AuditEvent.CERTIFICATION_REVOKED, actor, cert, before, clean_reason)
        _tell_leads(
            cert,
            NotificationKind.CERTIFICATION_DECIDED,
            f"was revoked by {actor.get_username()}",
            key=f"certification.revoked:{cert.pk}",
            body=clean_reason,
            actor=actor,
            at=now,
        )
    return cert


def certifications_remind(*, now: datetime | None = None) -> int:
    """Beat's pass: tell the team's leads once of each certification that expires within
    CERTIFICATION_REMINDER_DAYS. Returns how many certifications were reminded of."""
    now = now or timezone.now()
    soon = now + timedelta(days=settings.CERTIFICATION_REMINDER_DAYS)
    due = Certification.objects.filter(
        state=CertificationState.CERTIFIED,
        reminded_at__isnull=True,
        expires_at__gt=now,
        expires_at__lte=soon,
    ).select_related("workload__team", "instance_type", "plan")
    count = 0
    for cert in due:
        with transaction.atomic():
            _tell_leads(
                cert,
                NotificationKind.CERTIFICATION_EXPIRING,
                f"expires on {cert.expires_at:%Y-%m-%d %H:%M} UTC: benchmark it again and "
                "propose it anew",
                key=f"certification.expiring:{cert.pk}",
                at=now,
            )
            Certification.objects.filter(pk=cert.pk).update(reminded_at=now)
        count += 1
    return count


def certified_for(workload_id: int, now: datetime) -> Mapping[ConfigurationKey, Certification]:
    """The workload's configurations in force at ``now``, keyed as a job's preference
    names them (``Certification.key``)."""
    return {
        cert.key: cert
        for cert in Certification.objects.filter(
            workload_id=workload_id, state=CertificationState.CERTIFIED
        ).select_related("instance_type", "plan")
        if cert.in_force(now)
    }


def certifications_drift_check(*, now: datetime | None = None) -> int:
    """Beat's pass: mark each certified configuration whose runs drift from its benchmark
    (scheduler/engine/drift.py) and tell the team's leads once when it starts; clear the
    mark when its runs match again. Returns how many started drifting."""
    from governance.selectors import certifications as cert_selectors

    now = now or timezone.now()
    started = 0
    runs_of: dict[int, Any] = {}
    for cert in Certification.objects.filter(state=CertificationState.CERTIFIED).select_related(
        "workload__team", "instance_type", "plan"
    ):
        if cert.workload_id not in runs_of:
            runs_of[cert.workload_id] = cert_selectors.completed_runs(cert.workload_id)
        figure = cert_selectors.drift_of(cert, runs_of[cert.workload_id])
        if figure["drifting"] and cert.drifting_since is None:
            with transaction.atomic():
                Certification.objects.filter(pk=cert.pk).update(drifting_since=now)
                _tell_leads(
                    cert,
                    NotificationKind.CERTIFICATION_DRIFT,
                    f"drifts: its runs take {figure['p50']:.2f}x the certified time (p50 "
                    f"over {figure['runs']} runs)",
                    key=f"certification.drift:{cert.pk}:{now.isoformat()}",
                    at=now,
                )
            started += 1
        elif not figure["drifting"] and cert.drifting_since is not None:
            Certification.objects.filter(pk=cert.pk).update(drifting_since=None)
    return started
