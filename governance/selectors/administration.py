"""Reads for the admins' pages (``/admin/``): queues, instance types, teams, shares and
users as the lists and forms show them, each list in a bounded number of queries."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Prefetch, QuerySet

from governance.models import (
    JobQueue,
    Membership,
    MembershipRole,
    QueueCapacity,
    Share,
    Team,
)
from governance.roles import ADMIN_GROUP, AGENT_GROUP, REVIEWER_GROUP

SITE_ROLES = (ADMIN_GROUP, REVIEWER_GROUP, AGENT_GROUP)


def capacity_of(queue: JobQueue) -> dict[str, int]:
    return dict(
        QueueCapacity.objects.filter(queue=queue).values_list("instance_type__name", "count")
    )


def teams_with_people() -> list[dict[str, Any]]:
    """Every team with its leads' and members' usernames."""
    memberships = Membership.objects.select_related("user").order_by("user__username")
    teams = Team.objects.order_by("name").prefetch_related(
        Prefetch("memberships", queryset=memberships, to_attr="people")
    )
    return [
        {
            "team": team,
            "leads": [m.user.get_username() for m in team.people if m.role == MembershipRole.LEAD],
            "members": [
                m.user.get_username() for m in team.people if m.role == MembershipRole.MEMBER
            ],
        }
        for team in teams
    ]


def teams() -> QuerySet[Team]:
    return Team.objects.order_by("name")


def shares() -> QuerySet[Share]:
    return Share.objects.select_related("queue", "team").order_by("queue__name", "name")


def usernames(*, active_only: bool = True) -> list[str]:
    users = get_user_model().objects.order_by("username")
    if active_only:
        users = users.filter(is_active=True)
    return list(users.values_list("username", flat=True))


def users_with_roles() -> list[dict[str, Any]]:
    """Every user with their site roles and the teams they lead or belong to."""
    memberships = Membership.objects.select_related("team").order_by("team__name")
    users = (
        get_user_model()
        .objects.order_by("username")
        .prefetch_related("groups", Prefetch("memberships", queryset=memberships, to_attr="teams"))
    )
    return [describe_user(user) for user in users]


def describe_user(user: Any) -> dict[str, Any]:
    """A user's site roles (in ``SITE_ROLES`` order) and team roles, as the pages show them."""
    groups = {g.name for g in user.groups.all()}
    teams = getattr(user, "teams", None)
    if teams is None:
        teams = list(Membership.objects.filter(user=user).select_related("team"))
    return {
        "user": user,
        "roles": [role for role in SITE_ROLES if role in groups],
        "leads": [m.team for m in teams if m.role == MembershipRole.LEAD],
        "member_of": [m.team for m in teams if m.role == MembershipRole.MEMBER],
    }


def user(pk: int) -> Any:
    return get_user_model().objects.filter(pk=pk).first()
