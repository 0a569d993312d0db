"""Reads of teams with their leads and members (one query for all memberships)."""

from __future__ import annotations

from collections.abc import Collection

from django.db.models import Prefetch, QuerySet

from governance.models import Membership, MembershipRole, Team


def teams() -> QuerySet[Team]:
    return Team.objects.prefetch_related(
        Prefetch(
            "memberships",
            queryset=Membership.objects.select_related("user").order_by("user__username"),
        )
    ).order_by("name")


def team(pk: int) -> Team | None:
    return Team.objects.filter(pk=pk).first()


def teams_by_id(ids: Collection[int]) -> QuerySet[Team]:
    return Team.objects.filter(pk__in=ids)


def usernames(team: Team, role: MembershipRole) -> list[str]:
    """Usernames of ``team``'s memberships in ``role``, from the prefetched memberships."""
    return sorted(m.user.get_username() for m in team.memberships.all() if m.role == role)


def lead_names(team_ids: Collection[int]) -> list[str]:
    """The user names of the leads of these teams, sorted (whom a member asks to file an
    exception)."""
    if not team_ids:
        return []
    return sorted(
        set(
            Membership.objects.filter(team_id__in=team_ids, role=MembershipRole.LEAD).values_list(
                "user__username", flat=True
            )
        )
    )
