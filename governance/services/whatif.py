"""What-if runs (docs/signals.md): requesting one, its progress and result as the worker reports
them, and attaching a result to an allocation agreement as evidence.

The replay itself is the scheduler's (``scheduler.whatif``, run by a Celery task that
calls the three reporting services here); these services only validate, write and audit.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from governance import roles
from governance.celery import app as celery_app
from governance.models import Agreement, AuditEvent, JobQueue, Share, WhatIf, WhatIfState
from governance.roles import AnyUser
from governance.services import audit, notifications
from governance.services.agreements import may_change
from governance.services.errors import NotFound, PermissionDenied, TooMany, ValidationFailed
from governance.services.limits import MAX_INSTANCES, is_int
from governance.services.shares import SHARE_FIELDS, validate_share_fields

SCENARIO_FIELDS = (
    "policy",
    "borrow_limit",
    "limits",
    "in_share_preemption",
    "preemption_retries",
    "borrow_requires_verified_recovery",
)
# The two baselines a proposal may start from (docs/agreements.md#what-if-against-promises):
# every share on its own capacity, or every share lending and borrowing without bound.
BASELINES: dict[str, dict[str, Any]] = {
    "strict_partitions": {"policy": "RESERVE"},
    "pooled": {"policy": "LEND_AND_BORROW", "borrow_limit": -1},
}
BASELINE_LABELS = {"strict_partitions": "strict partitions", "pooled": "pooled"}


def baseline_shares(queue: JobQueue, baseline: str) -> dict[str, dict[str, Any]]:
    """The share fields of ``baseline`` for every share of the queue."""
    fields = BASELINES[baseline]
    names = Share.objects.filter(queue=queue).order_by("name").values_list("name", flat=True)
    return {name: dict(fields) for name in names}


MAX_STEP = 200
MAX_ERROR = 2000
# A run unfinished this long after its request no longer counts against its requester's
# cap (its worker's message was lost): the cap limits load, it must not lock anyone out.
STALE_AFTER = timedelta(hours=1)


def may_request(actor: AnyUser) -> bool:
    """Admins, reviewers (who judge agreements against their outcomes) and team leads ask
    what a configuration would have done."""
    return roles.can_decide_exceptions(actor) or bool(roles.lead_team_ids(actor))


def clean_proposal(queue: JobQueue, proposal: Any) -> dict[str, Any]:
    """The proposal in the scenario's terms, every field checked as the share editor and
    the capacity form check it; errors keyed ``shares.NAME.FIELD`` / ``capacity.TYPE``."""
    if not isinstance(proposal, dict):
        raise ValidationFailed({"proposal": ["Send shares and/or capacity to change."]})
    baseline = proposal.get("baseline") or None
    if baseline is not None and baseline not in BASELINES:
        raise ValidationFailed({"baseline": [f"One of {', '.join(BASELINES)}, or none."]})
    shares_in = proposal.get("shares") or {}
    capacity_in = proposal.get("capacity") or {}
    errors: dict[str, list[str]] = {}
    if not isinstance(shares_in, dict):
        raise ValidationFailed({"shares": ["Map share names to the fields to change."]})
    if not isinstance(capacity_in, dict):
        raise ValidationFailed({"capacity": ["Map instance types to counts."]})
    if len(shares_in) > 20 or len(capacity_in) > 20:
        raise ValidationFailed({"proposal": ["At most 20 shares and 20 types."]})
    if baseline is not None and isinstance(shares_in, dict):
        # The baseline's fields first, the custom edits of a share over them.
        base = baseline_shares(queue, baseline)
        for name, fields in shares_in.items():
            if isinstance(fields, dict) and name in base:
                base[name] = {**base[name], **fields}
            else:
                base[name] = fields
        shares_in = base
    if not shares_in and not capacity_in:
        raise ValidationFailed({"proposal": ["Change at least one share field or capacity."]})
    by_name = {s.name: s for s in Share.objects.filter(queue=queue).select_related("queue")}
    shares: dict[str, dict[str, Any]] = {}
    for name, fields in shares_in.items():
        share = by_name.get(name) if isinstance(name, str) else None
        if share is None:
            errors[f"shares.{str(name)[:100]}"] = ["No such share in this queue."]
            continue
        if not isinstance(fields, dict) or not fields:
            errors[f"shares.{name}"] = ["Give the share fields to change."]
            continue
        unknown = [k for k in fields if k not in SHARE_FIELDS or k not in SCENARIO_FIELDS]
        if unknown:
            for key in unknown:
                errors[f"shares.{name}.{str(key)[:50]}"] = ["Not a field a what-if can change."]
            continue
        try:
            values = validate_share_fields(share, fields)
        except ValidationFailed as exc:
            for key, messages in exc.errors.items():
                errors[f"shares.{name}.{key}"] = messages
            continue
        given = set(fields) | ({"borrow_limit"} if "policy" in fields else set())
        out = {key: values[key] for key in SCENARIO_FIELDS if key in given}
        if "borrow_limit" in out and out["borrow_limit"] is None:
            out["borrow_limit"] = -1
        shares[name] = out
    known_types = set(queue.capacities.values_list("instance_type__name", flat=True))
    capacity: dict[str, int] = {}
    for type_name, count in capacity_in.items():
        key = f"capacity.{str(type_name)[:64]}"
        if type_name not in known_types:
            errors[key] = ["This queue has no such instance type."]
        elif not is_int(count) or not 0 <= count <= MAX_INSTANCES:
            errors[key] = [f"A whole number from 0 to {MAX_INSTANCES}."]
        else:
            capacity[type_name] = count
    if errors:
        raise ValidationFailed(errors)
    clean: dict[str, Any] = {"shares": shares, "capacity": capacity}
    if baseline is not None:
        clean["baseline"] = baseline
    return clean


def _within_cap(actor: AnyUser, now: datetime) -> None:
    """At most ``WHATIF_MAX_PER_USER`` of the actor's runs queued or running at once. The
    actor's user row is locked, so two requests sent together are counted one after the
    other."""
    user_id: Any = actor.pk
    get_user_model().objects.select_for_update().filter(pk=user_id).first()
    running = WhatIf.objects.filter(
        requested_by_id=user_id,
        state__in=(WhatIfState.QUEUED, WhatIfState.RUNNING),
        created_at__gt=now - STALE_AFTER,
    ).count()
    if running >= settings.WHATIF_MAX_PER_USER:
        raise TooMany(
            {
                "detail": [
                    f"You have {running} what-if runs queued or running (at most "
                    f"{settings.WHATIF_MAX_PER_USER} at once): wait for one to finish."
                ]
            }
        )


@transaction.atomic
def whatif_request(
    *, actor: AnyUser, queue: JobQueue, start: datetime, stop: datetime, proposal: Any
) -> WhatIf:
    """Record a what-if to run: the queue's window and the proposed configuration, and
    queue its replay once the transaction commits. Each requester has at most
    ``WHATIF_MAX_PER_USER`` runs queued or running (else 429)."""
    if not may_request(actor):
        raise PermissionDenied({"detail": ["Only admins, reviewers and team leads run what-ifs."]})
    clean = clean_proposal(queue, proposal)
    now = timezone.now()
    _within_cap(actor, now)
    run = WhatIf.objects.create(
        queue=queue,
        requested_by_id=actor.pk if actor.is_authenticated else None,
        window_start=start,
        window_stop=stop,
        proposal=clean,
        created_at=now,
        step="waiting for a worker",
    )
    audit.record(
        event_type=AuditEvent.WHATIF_REQUESTED,
        actor=actor,
        subject=run,
        after={
            "queue": queue.pk,
            "from": start.isoformat(),
            "to": stop.isoformat(),
            "proposal": clean,
        },
        queue_id=queue.pk,
        at=now,
    )
    _queue_replay(run.pk)
    return run


def _queue_replay(whatif_id: int) -> None:
    """Queue the replay of a requested what-if once the request's transaction commits."""
    # By name: the task module imports governance, so importing it here would make a loop.
    # On the what-if queue (settings.WHATIF_QUEUE), which only the what-if worker reads.
    transaction.on_commit(
        lambda: celery_app.send_task(
            "scheduler.tasks.run_whatif", args=(whatif_id,), queue=settings.WHATIF_QUEUE
        )
    )


def whatif_progress(*, whatif_id: int, progress: int, step: str) -> None:
    """The worker's progress report (0 to 100, and what it is doing)."""
    WhatIf.objects.filter(pk=whatif_id, state__in=(WhatIfState.QUEUED, WhatIfState.RUNNING)).update(
        state=WhatIfState.RUNNING, progress=max(0, min(100, int(progress))), step=step[:MAX_STEP]
    )


def whatif_finish(*, whatif_id: int, result: dict[str, Any]) -> None:
    WhatIf.objects.filter(pk=whatif_id).update(
        state=WhatIfState.DONE,
        progress=100,
        step="done",
        result=result,
        finished_at=timezone.now(),
    )


def whatif_fail(*, whatif_id: int, error: str) -> None:
    WhatIf.objects.filter(pk=whatif_id).update(
        state=WhatIfState.FAILED, step="failed", error=error[:MAX_ERROR], finished_at=timezone.now()
    )


@transaction.atomic
def whatif_attach(*, actor: AnyUser, whatif: WhatIf | int, agreement: Agreement | int) -> WhatIf:
    """Attach a finished what-if to an allocation agreement as evidence (who may change
    the agreement may attach). Evidence already attached to another agreement moves only
    for someone who may change that one too (its owner, editors, admins), and that
    agreement's owner and editors are told it left."""
    run = (
        WhatIf.objects.select_for_update()
        .filter(pk=whatif if isinstance(whatif, int) else whatif.pk)
        .first()
    )
    if run is None:
        raise NotFound({"detail": ["No such what-if."]})
    agreement_id = agreement if isinstance(agreement, int) else agreement.pk
    target = Agreement.objects.filter(pk=agreement_id).prefetch_related("editors").first()
    if target is None:
        raise ValidationFailed({"agreement": [f"No agreement with id {agreement_id}."]})
    if not may_change(actor, target):
        raise PermissionDenied(
            {"agreement": ["Only the agreement's owner, its editors and admins attach evidence."]}
        )
    source = (
        Agreement.objects.filter(pk=run.agreement_id).prefetch_related("editors").first()
        if run.agreement_id is not None and run.agreement_id != target.pk
        else None
    )
    if source is not None and not may_change(actor, source):
        raise PermissionDenied(
            {
                "agreement": [
                    f"This what-if is evidence for agreement '{source.title}': only its "
                    "owner, its editors and admins may move it to another agreement."
                ]
            }
        )
    if run.state != WhatIfState.DONE:
        raise ValidationFailed({"whatif": ["Only a finished what-if can be evidence."]})
    before = {"agreement": run.agreement_id}
    run.agreement = target
    run.attached_at = timezone.now()
    run.save(update_fields=["agreement", "attached_at"])
    audit.record(
        event_type=AuditEvent.WHATIF_ATTACHED,
        actor=actor,
        subject=target,
        before=before,
        after={"agreement": target.pk, "whatif": run.pk, "queue": run.queue_id},
        queue_id=run.queue_id,
        at=run.attached_at,
    )
    if source is not None:
        notifications.evidence_moved(run, source=source, target=target, actor=actor)
    return run
