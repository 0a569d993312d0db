"""What every service needs and no service should write again: the admin check, integer
checks (from ``limits``, re-exported), locking a job row, a job's timeline event."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from governance.models import Job, JobEvent
from governance.roles import AnyUser, is_admin
from governance.services import inserts
from governance.services.errors import NotFound, PermissionDenied
from governance.services.limits import is_int, valid_id

__all__ = ["is_int", "job_event", "lock_job", "require_admin", "valid_id"]


def require_admin(actor: AnyUser, action: str) -> None:
    """Refuse ``action`` ("change capacity") to anyone but an admin."""
    if not is_admin(actor):
        raise PermissionDenied({"detail": [f"Only admins may {action}."]})


def lock_job(job: Job | int, *related: str) -> Job:
    """The job's row, locked for the rest of the transaction (``related`` joined in)."""
    job_id = job.pk if isinstance(job, Job) else job
    found = (
        Job.objects.select_for_update(of=("self",))
        .select_related(*related)
        .filter(pk=job_id)
        .first()
        if valid_id(job_id)
        else None
    )
    if found is None:
        raise NotFound({"detail": [f"No job with id {job_id}."]})
    return found


def job_event(job: Job, at: datetime, type_: str, message: str, **data: Any) -> JobEvent:
    """One entry of the job's timeline (what its page shows; the audit trail is apart)."""
    event = JobEvent(job=job, at=at, type=type_, message=message, data=data)
    inserts.insert(event)
    return event
