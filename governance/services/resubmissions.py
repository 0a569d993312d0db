"""Answering a decision by resubmitting (docs/workloads.md#decisions): a copy of the
failed job, submitted through the job service, linked to the decision. Apart from
``services/decisions.py`` because the scheduler opens decisions and must not reach the
job service through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from governance.models import AuditEvent, Decision, DecisionState, Job
from governance.roles import AnyUser
from governance.services import jobs as job_services
from governance.services.decisions import (
    check_open,
    clean_note,
    decide,
    decision_snapshot,
    open_for,
)
from governance.services.errors import Errors, ServiceError
from governance.services.kit import job_event

# What a resubmission may change from the failed job; the rest is copied.
RESUBMIT_FIELDS = (
    "name",
    "priority",
    "preferences",
    "count",
    "max_pending",
    "checkpoint_interval",
    "duration",
    "may_borrow",
    "preemptible",
    "deadline",
    "max_cost",
)


class _Undo(Exception):
    """Rolls back a resubmission that passed while the rest of the answer did not."""


def resubmit_defaults(job: Job) -> dict[str, Any]:
    """The failed job's fields a resubmission starts from (the form's initial values)."""
    return {
        "name": job.name,
        "priority": job.priority,
        "preferences": [dict(p) for p in job.preferences],
        "count": None,
        "max_pending": job.max_pending,
        "checkpoint_interval": job.checkpoint_interval,
        "duration": job.duration,
        "may_borrow": job.may_borrow,
        "preemptible": job.preemptible,
        "deadline": job.deadline,
        "max_cost": job.max_cost,
    }


def decision_resubmit(
    *,
    actor: AnyUser,
    decision: Decision | int,
    changes: Mapping[str, Any] | None = None,
    note: Any = "",
) -> Decision:
    """Answer by submitting a copy of the failed job (its team's leads, admins):
    ``changes`` replaces any of ``RESUBMIT_FIELDS`` (other preferences, a capacity plan, a
    new deadline...), the rest is the failed job's; the job service checks the copy as
    any submission. Audited as DECISION_RESUBMITTED (and the new job as JOB_SUBMITTED)."""
    changes = dict(changes or {})
    with transaction.atomic():
        locked = open_for(actor, decision, "state")
        errors = Errors()
        check_open(errors, locked)
        clean = clean_note(errors, "note", note, required=False)
        for field in sorted(set(changes) - set(RESUBMIT_FIELDS)):
            errors.add(field, f"A resubmission may change only: {', '.join(RESUBMIT_FIELDS)}.")
        fields = resubmit_defaults(locked.job)
        if "count" in changes and "preferences" not in changes and changes["count"] is not None:
            # One job-level count for the copied preferences: drop their own counts.
            fields["preferences"] = [
                {k: v for k, v in p.items() if k != "count"} for p in fields["preferences"]
            ]
        fields.update({k: v for k, v in changes.items() if k in RESUBMIT_FIELDS})
        new_job: Job | None = None
        try:
            with transaction.atomic():
                new_job = job_services.job_submit(
                    actor=actor,
                    share=locked.job.share_id,
                    kind=locked.job.kind,
                    program=locked.job.program or None,
                    workload=locked.job.workload_id,
                    **fields,
                )
                if errors:  # the copy is fine, the rest is not: undo it
                    raise _Undo
        except _Undo:
            new_job = None
        except ServiceError as exc:
            # The submission's own rules beside the decision's: every problem at once.
            for field, messages in exc.errors.items():
                for message in messages:
                    errors.add(field, message)
        errors.raise_if_any()
        assert new_job is not None
        now = timezone.now()
        before = decision_snapshot(locked)
        locked.resubmitted_job = new_job
        decide(
            locked,
            actor=actor,
            state=DecisionState.RESUBMITTED,
            note=clean,
            event=AuditEvent.DECISION_RESUBMITTED,
            before=before,
            now=now,
        )
        job_event(
            new_job,
            now,
            "resubmitted",
            f"Resubmitted from job {locked.job_id} (decision {locked.pk}).",
            decision=locked.pk,
            from_job=locked.job_id,
        )
    return locked
