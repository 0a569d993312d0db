"""Reads of the audit trail: reviewers and admins only."""

from __future__ import annotations

from django.db.models import QuerySet

from governance import roles
from governance.models import AuditEntry
from governance.roles import AnyUser
from governance.services.errors import PermissionDenied


def may_read_audit(user: AnyUser) -> bool:
    return roles.is_admin(user) or roles.is_reviewer(user)


def audit_entries(user: AnyUser) -> QuerySet[AuditEntry]:
    """The whole trail, newest first (keyset-friendly: created_at, then id), with actors.

    Raises PermissionDenied for anyone but reviewers and admins: the trail shows every
    team's justifications and decisions.
    """
    if not may_read_audit(user):
        raise PermissionDenied({"detail": ["Only reviewers and admins may read the audit trail."]})
    return AuditEntry.objects.select_related("actor").order_by("-created_at", "-id")
