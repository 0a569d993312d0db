"""Reads of share change requests for the API and the pages (no N+1)."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from governance.models import AuditEntry, AuditEvent, ChangeRequestState, ShareChangeRequest


def change_requests() -> QuerySet[ShareChangeRequest]:
    """Every change request, newest first, with its share, team and people loaded."""
    return ShareChangeRequest.objects.select_related(
        "share", "share__queue", "team", "requester", "decided_by"
    ).order_by("-created_at", "-id")


def change_request_history(cr: ShareChangeRequest) -> list[AuditEntry]:
    """The request's audit entries, oldest first, and the share edit its approval made."""
    wanted = Q(subject_type="sharechangerequest", subject_id=str(cr.pk))
    if cr.applied_version is not None:
        wanted |= Q(
            event_type=AuditEvent.SHARE_UPDATED,
            share_id=cr.share_id,
            after__version=cr.applied_version,
        )
    return list(
        AuditEntry.objects.filter(wanted).select_related("actor").order_by("created_at", "id")
    )


def pending_count() -> int:
    """How many change requests wait for an admin's decision."""
    return ShareChangeRequest.objects.filter(state=ChangeRequestState.PENDING).count()
