"""Reads of teams with their leads and members (one query for all memberships)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from governance.models import Membership, MembershipRole, Team


def teams() -> QuerySet[Team]:
    return Team.objects.prefetch_related(
        Prefetch(
            "memberships",
            queryset=Membership.objects.select_related("user").order_by("user__username"),
        )
    ).order_by("name")


def usernames(team: Team, role: MembershipRole) -> list[str]:
    """Usernames of ``team``'s memberships in ``role``, from the prefetched memberships."""
    return sorted(m.user.get_username() for m in team.memberships.all() if m.role == role)
