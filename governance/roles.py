"""Who may do what. Site roles are Django groups; team roles are memberships."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from governance.models import Membership, MembershipRole, Team

ADMIN_GROUP = "admin"
REVIEWER_GROUP = "reviewer"
AGENT_GROUP = "agent"

AnyUser = AbstractBaseUser | AnonymousUser


def _groups(user: AnyUser) -> set[str]:
    """The user's group names, read once per user object (a request asks many times)."""
    if not user.is_authenticated:
        return set()
    cached: set[str] | None = getattr(user, "_role_groups", None)
    if cached is None:
        groups: Any = getattr(user, "groups")  # noqa: B009  (custom user models may lack it)
        cached = set(groups.values_list("name", flat=True))
        setattr(user, "_role_groups", cached)  # noqa: B010
    return cached


def remember_groups(user: AnyUser, names: list[str]) -> None:
    """The user's group names, read with the user by the caller (the API's token check
    reads them in its one statement), so no role check of this request reads them."""
    setattr(user, "_role_groups", set(names))  # noqa: B010


def is_admin(user: AnyUser) -> bool:
    return bool(
        user.is_authenticated
        and (getattr(user, "is_superuser", False) or ADMIN_GROUP in _groups(user))
    )


def is_reviewer(user: AnyUser) -> bool:
    return REVIEWER_GROUP in _groups(user)


def is_agent(user: AnyUser) -> bool:
    """Agents run admitted jobs on external clusters (docs/agents.md)."""
    return AGENT_GROUP in _groups(user)


def may_change_shares(user: AnyUser) -> bool:
    """Shares (and so their preview) are changed by admins only."""
    return is_admin(user)


def can_decide_exceptions(user: AnyUser) -> bool:
    return is_admin(user) or is_reviewer(user)


def lead_team_ids(user: AnyUser) -> set[int]:
    if not user.is_authenticated:
        return set()
    return set(
        Membership.objects.filter(user_id=user.pk, role=MembershipRole.LEAD).values_list(
            "team_id", flat=True
        )
    )


def member_team_ids(user: AnyUser) -> set[int]:
    """Teams the user belongs to in any role (leads included)."""
    if not user.is_authenticated:
        return set()
    return set(Membership.objects.filter(user_id=user.pk).values_list("team_id", flat=True))


def is_lead_of(user: AnyUser, team: Team | int) -> bool:
    team_id = team if isinstance(team, int) else team.pk
    return team_id in lead_team_ids(user)


def may_see_program(user: AnyUser, job: Any) -> bool:
    """A job's ``program`` (its command or script, working directory and ``env``, which
    may hold credentials): its team's members and leads, admins, and the agent holding
    its current run. Everyone else signed in sees the job without it."""
    if not user.is_authenticated:
        return False
    if is_admin(user) or (job.claimed_by_id is not None and job.claimed_by_id == user.pk):
        return True
    return Membership.objects.filter(user_id=user.pk, team_id=job.share.team_id).exists()


# ``band_roles``'s ``team_role`` when the caller has not read the membership.
UNREAD: Any = object()


def band_roles(user: AnyUser, team: Team | int | None, *, team_role: Any = UNREAD) -> set[str]:
    """The roles a user holds for using priority bands (``usable_by`` values).

    ``team_role``: the user's membership role in ``team`` (None: not a member) when the
    caller read it already (a submission reads it with the share); read here otherwise."""
    roles: set[str] = set()
    if is_admin(user):
        roles.add("admin")
    if is_reviewer(user):
        roles.add("reviewer")
    if team is not None and user.is_authenticated:
        if team_role is UNREAD:
            team_id = team if isinstance(team, int) else team.pk
            membership = Membership.objects.filter(user_id=user.pk, team_id=team_id).first()
            team_role = membership.role if membership is not None else None
        if team_role is not None:
            roles.add("member")
            if team_role == MembershipRole.LEAD:
                roles.add("lead")
    return roles
