"""Preference templates (docs/workloads.md#preference-templates): a workload's ordered
list of certified configurations, each with the reason for its place, and defaults for
max pending, deadline (an offset from submission) and max cost. A job naming the workload
and no preferences takes it (``expand``); the certified-only share rule lives here too
(``check_certified``), since both read the workload's configurations in force."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, cast

from django.db import transaction
from django.utils import timezone

from governance.models import (
    AuditEvent,
    Certification,
    PreferenceTemplate,
    TemplateEntry,
    Workload,
)
from governance.models.certifications import key_text, preference_key
from governance.models.jobs import MAX_PREFERENCES
from governance.roles import AnyUser
from governance.services import audit, limits
from governance.services import certifications as cert_services
from governance.services import workloads as workload_services
from governance.services.errors import Errors, NotFound, PermissionDenied
from governance.services.kit import is_int

REASON_MAX_LENGTH = 500
MAX_COST = Decimal("999999999999.99")


def template_snapshot(template: PreferenceTemplate | None) -> dict[str, Any] | None:
    """The template's API fields as JSON, for audit ``before``/``after``."""
    if template is None:
        return None
    return {
        "entries": [
            {"position": e.position, "certification": e.certification_id, "reason": e.reason}
            for e in template.entries.order_by("position")
        ],
        "max_pending": template.max_pending,
        "deadline_offset": template.deadline_offset,
        "max_cost": str(template.max_cost) if template.max_cost is not None else None,
    }


def _clean_entries(
    errors: Errors, workload: Workload, entries: Any, now: datetime
) -> list[tuple[Certification, str]]:
    if not isinstance(entries, list) or not entries:
        errors.add(
            "entries",
            f"Give 1 to {MAX_PREFERENCES} entries as "
            '[{"certification": id, "reason": "why it stands here"}].',
        )
        return []
    if len(entries) > MAX_PREFERENCES:
        errors.add("entries", f"At most {MAX_PREFERENCES} entries; {len(entries)} given.")
    clean: list[tuple[Certification, str]] = []
    seen: set[int] = set()
    for index, entry in enumerate(entries[:MAX_PREFERENCES]):
        key = f"entries[{index}]"
        if not isinstance(entry, dict):
            errors.add("entries", f'{key} must be an object {{"certification", "reason"}}.')
            continue
        cert_id = entry.get("certification")
        cert = (
            Certification.objects.select_related("instance_type", "plan")
            .filter(pk=cast(int, cert_id), workload=workload)
            .first()
            if limits.valid_id(cert_id)
            else None
        )
        reason = entry.get("reason")
        clean_reason = reason.strip() if isinstance(reason, str) else ""
        if not clean_reason:
            errors.add("entries", f"{key}.reason: say why it stands in this place.")
        elif len(clean_reason) > REASON_MAX_LENGTH:
            errors.add("entries", f"{key}.reason: at most {REASON_MAX_LENGTH} characters.")
        if cert is None:
            errors.add(
                "entries", f"{key}.certification: no configuration {cert_id} of {workload.name}."
            )
            continue
        if not cert.in_force(now):
            errors.add(
                "entries",
                f"{key}.certification: {cert.configuration} is {cert.status(now)}; a template "
                "lists certified, unexpired configurations only.",
            )
        if cert.pk in seen:
            errors.add("entries", f"{key}.certification: {cert.configuration} is listed twice.")
        seen.add(cert.pk)
        clean.append((cert, clean_reason))
    return clean


def _clean_cost(errors: Errors, value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    amount = cert_services.cents(value, MAX_COST)
    if amount is None:
        errors.add("max_cost", f"Empty or an amount from 0 to {MAX_COST}, at most 2 decimals.")
        return None
    return amount


def template_set(
    *,
    actor: AnyUser,
    workload: Workload | int,
    entries: Any,
    max_pending: Any = None,
    deadline_offset: Any = None,
    max_cost: Any = None,
) -> PreferenceTemplate:
    """Replace a workload's template (its team's leads, admins): ``entries`` in order,
    each ``{"certification": id, "reason": text}`` naming a certified, unexpired
    configuration of the workload. Audited as WORKLOAD_TEMPLATE_CHANGED."""
    workload_id = workload.pk if isinstance(workload, Workload) else workload
    with transaction.atomic():
        found = (
            Workload.objects.select_for_update(of=("self",))
            .select_related("team")
            .filter(pk=cast(int, workload_id))
            .first()
            if limits.valid_id(workload_id)
            else None
        )
        if found is None:
            raise NotFound({"detail": [f"No workload with id {workload_id}."]})
        if not workload_services.may_edit(actor, found.team_id):
            raise PermissionDenied(
                {"detail": [f"Only leads of team {found.team.name} and admins set its templates."]}
            )
        now = timezone.now()
        errors = Errors()
        clean = _clean_entries(errors, found, entries, now)
        for name, value in (("max_pending", max_pending), ("deadline_offset", deadline_offset)):
            limits.check_int(
                errors,
                name,
                value,
                minimum=1,
                maximum=limits.MAX_SECONDS,
                nullable=True,
                label=f"the {name.replace('_', ' ')} (seconds)",
            )
        budget = _clean_cost(errors, max_cost)
        errors.raise_if_any()
        template = PreferenceTemplate.objects.filter(workload=found).first()
        before = template_snapshot(template)
        if template is None:
            template = PreferenceTemplate(workload=found)
        template.max_pending = max_pending
        template.deadline_offset = deadline_offset
        template.max_cost = budget
        template.updated_by = cast(Any, actor) if actor.is_authenticated else None
        template.save()
        template.entries.all().delete()
        TemplateEntry.objects.bulk_create(
            TemplateEntry(template=template, position=i + 1, certification=cert, reason=reason)
            for i, (cert, reason) in enumerate(clean)
        )
        after = template_snapshot(template)
        if after != before:
            audit.record(
                event_type=AuditEvent.WORKLOAD_TEMPLATE_CHANGED,
                actor=actor,
                subject=found,
                before=before,
                after=after,
                team_id=found.team_id,
                at=now,
            )
    return template


@dataclass
class Expansion:
    """What a template gives a job: its preferences (certified run time as ``runtime``),
    the record kept on the job (``Job.template``), the defaults, and a warning per entry
    skipped."""

    preferences: list[dict[str, Any]] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    max_pending: int | None = None
    deadline_offset: int | None = None
    max_cost: Decimal | None = None
    warnings: list[str] = field(default_factory=list)


def expand(errors: Errors, workload: Workload, now: datetime) -> Expansion | None:
    """The workload's template as a job's preferences at ``now``. An entry whose
    configuration is no longer in force (expired, revoked) is skipped with a warning; no
    template, or none left, is an error on ``preferences``."""
    template = (
        PreferenceTemplate.objects.filter(workload=workload)
        .prefetch_related("entries__certification__instance_type", "entries__certification__plan")
        .first()
    )
    if template is None or not template.entries.all():
        errors.add(
            "preferences",
            f"Workload {workload.name} has no preference template: give preferences.",
        )
        return None
    out = Expansion(
        max_pending=template.max_pending,
        deadline_offset=template.deadline_offset,
        max_cost=template.max_cost,
    )
    used: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for entry in template.entries.all():
        cert = entry.certification
        if not cert.in_force(now):
            why = (
                f"expired on {cert.expires_at:%Y-%m-%d %H:%M} UTC"
                if cert.status(now) == "expired" and cert.expires_at
                else str(cert.status(now))
            )
            skipped.append(
                {"position": entry.position, "configuration": cert.configuration, "why": why}
            )
            out.warnings.append(
                f"Template entry {entry.position} ({cert.configuration}) was skipped: its "
                f"certification {why}."
            )
            continue
        kind, name, count = cert.key
        pref: dict[str, Any] = {"plan" if kind == "plan" else "instance_type": name}
        pref.update(count=count, runtime=cert.runtime)
        out.preferences.append(pref)
        used.append({"position": entry.position, "certification": cert.pk, "reason": entry.reason})
    if not out.preferences:
        errors.add(
            "preferences",
            f"Every entry of workload {workload.name}'s template is expired or revoked: "
            "give preferences, or have its configurations certified again.",
        )
        return None
    out.record = {"entries": used, "skipped": skipped}
    return out


def check_certified(
    errors: Errors,
    *,
    share_name: str,
    workload: Workload | None,
    resolved: Sequence[dict[str, Any]],
    now: datetime,
) -> None:
    """A certified-only share's rule: the job names a workload and every preference is a
    certified, unexpired configuration of it (else an error naming the preference)."""
    if workload is None:
        errors.add(
            "workload",
            f"Share {share_name} is certified-only: name a workload whose configurations "
            "are certified.",
        )
        return
    in_force = cert_services.certified_for(workload.pk, now)
    for index, pref in enumerate(resolved):
        if not is_int(pref.get("count")):
            continue
        key = preference_key(pref)
        if key not in in_force:
            errors.add(
                "preferences",
                f"preferences[{index}]: {key_text(key)} is not certified for {workload.name}.",
            )
