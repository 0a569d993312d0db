"""Teams and their memberships (leads and members). Admins only.

Leads and members are given and shown as usernames so an admin can write them by hand;
a lead is not also listed as a member (a lead already has every member right).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from governance.models import AuditEvent, Membership, MembershipRole, Team
from governance.roles import AnyUser
from governance.services import audit
from governance.services.errors import Errors, NotFound, ValidationFailed
from governance.services.kit import require_admin

TEAM_FIELDS = ("name", "description", "leads", "members")


def membership_snapshot(team: Team) -> dict[str, list[str]]:
    """Sorted usernames of the team's leads and members, as the API and audit show them."""
    leads: list[str] = []
    members: list[str] = []
    for membership in Membership.objects.filter(team=team).select_related("user"):
        username = membership.user.get_username()
        (leads if membership.role == MembershipRole.LEAD else members).append(username)
    return {"leads": sorted(leads), "members": sorted(members)}


def team_snapshot(team: Team) -> dict[str, Any]:
    return audit.fields_of(team, "id", "name", "description", **membership_snapshot(team))


def _clean_name(name: Any, errors: Errors, *, exclude_pk: int | None = None) -> str:
    if not isinstance(name, str) or not name.strip():
        errors.add("name", "A team needs a name.")
        return ""
    name = name.strip()
    if len(name) > 100:
        errors.add("name", "At most 100 characters.")
    clash = Team.objects.filter(name__iexact=name)
    if exclude_pk is not None:
        clash = clash.exclude(pk=exclude_pk)
    if clash.exists():
        errors.add("name", f"A team named {name!r} already exists.")
    return name


def _resolve_users(field: str, usernames: Any, errors: Errors) -> dict[str, Any]:
    """Map each username to its user; unknown names are reported on ``field``."""
    if not isinstance(usernames, list | tuple) or not all(isinstance(u, str) for u in usernames):
        errors.add(field, "Give a list of usernames.")
        return {}
    wanted = list(dict.fromkeys(u.strip() for u in usernames if u.strip()))
    user_model = get_user_model()
    found = {u.get_username(): u for u in user_model.objects.filter(username__in=wanted)}
    unknown = [u for u in wanted if u not in found]
    if unknown:
        errors.add(field, f"Unknown user(s): {', '.join(unknown)}.")
    return found


def _check_overlap(
    leads: dict[str, Any], members: dict[str, Any], given: set[str], errors: Errors
) -> None:
    both = sorted(set(leads) & set(members))
    if both:
        field = "members" if "members" in given else "leads"
        errors.add(
            field,
            f"{', '.join(both)} cannot be both lead and member of one team; "
            "a lead has every member right, so list them once, as a lead.",
        )


def _set_memberships(team: Team, leads: dict[str, Any], members: dict[str, Any]) -> None:
    wanted = {user.pk: MembershipRole.LEAD for user in leads.values()}
    wanted.update({user.pk: MembershipRole.MEMBER for user in members.values()})
    existing = {m.user_id: m for m in Membership.objects.select_for_update().filter(team=team)}
    for user_id, membership in existing.items():
        if user_id not in wanted:
            membership.delete()
        elif membership.role != wanted[user_id]:
            membership.role = wanted[user_id]
            membership.save(update_fields=["role"])
    Membership.objects.bulk_create(
        Membership(team=team, user_id=user_id, role=role)
        for user_id, role in wanted.items()
        if user_id not in existing
    )


def team_create(
    *,
    actor: AnyUser,
    name: str,
    description: str = "",
    leads: list[str] | None = None,
    members: list[str] | None = None,
    reason: str = "",
) -> Team:
    """Create a team with its leads and members (usernames). Audited as TEAM_CREATED."""
    require_admin(actor, "create teams")
    errors = Errors()
    with transaction.atomic():
        clean_name = _clean_name(name, errors)
        lead_users = _resolve_users("leads", leads or [], errors)
        member_users = _resolve_users("members", members or [], errors)
        _check_overlap(lead_users, member_users, {"leads", "members"}, errors)
        errors.raise_if_any()
        try:
            with transaction.atomic():
                team = Team.objects.create(name=clean_name, description=description or "")
        except IntegrityError as exc:  # a concurrent create took the name
            raise ValidationFailed({"name": [f"A team named {clean_name!r} exists."]}) from exc
        _set_memberships(team, lead_users, member_users)
        audit.record(
            event_type=AuditEvent.TEAM_CREATED,
            actor=actor,
            subject=team,
            after=team_snapshot(team),
            reason=reason,
            team_id=team.pk,
        )
    return team


def team_update(
    *, actor: AnyUser, team: Team | int, changes: Mapping[str, Any], reason: str = ""
) -> Team:
    """Change a team's name/description (TEAM_UPDATED) and/or membership (MEMBERSHIP_CHANGED).

    ``changes`` holds only the fields to change; ``leads``/``members`` replace the whole
    list. Each kind of change gets its own audit entry so the trail can be filtered by it.
    """
    require_admin(actor, "change teams")
    unknown = set(changes) - set(TEAM_FIELDS)
    if unknown:
        raise ValidationFailed({field: ["Unknown field."] for field in sorted(unknown)})
    team_id = team if isinstance(team, int) else team.pk
    errors = Errors()
    with transaction.atomic():
        locked = Team.objects.select_for_update().filter(pk=team_id).first()
        if locked is None:
            raise NotFound({"detail": ["No such team."]})
        before = team_snapshot(locked)
        if "name" in changes:
            locked.name = _clean_name(changes["name"], errors, exclude_pk=locked.pk)
        if "description" in changes:
            locked.description = changes["description"] or ""
        user_model = get_user_model()
        if "leads" in changes:
            lead_users = _resolve_users("leads", changes["leads"], errors)
        else:
            lead_users = {
                u.get_username(): u for u in user_model.objects.filter(username__in=before["leads"])
            }
        if "members" in changes:
            member_users = _resolve_users("members", changes["members"], errors)
        else:
            member_users = {
                u.get_username(): u
                for u in user_model.objects.filter(username__in=before["members"])
            }
        _check_overlap(lead_users, member_users, set(changes), errors)
        errors.raise_if_any()

        locked.save(update_fields=["name", "description"])
        after_fields = {"name": locked.name, "description": locked.description}
        before_fields = {"name": before["name"], "description": before["description"]}
        if after_fields != before_fields:
            audit.record(
                event_type=AuditEvent.TEAM_UPDATED,
                actor=actor,
                subject=locked,
                before=before_fields,
                after=after_fields,
                reason=reason,
                team_id=locked.pk,
            )
        _set_memberships(locked, lead_users, member_users)
        after_members = membership_snapshot(locked)
        before_members = {"leads": before["leads"], "members": before["members"]}
        if after_members != before_members:
            audit.record(
                event_type=AuditEvent.MEMBERSHIP_CHANGED,
                actor=actor,
                subject=locked,
                before=before_members,
                after=after_members,
                reason=reason,
                team_id=locked.pk,
            )
    return locked


def user_set_teams(
    *,
    actor: AnyUser,
    user: Any,
    lead_of: list[int],
    member_of: list[int],
    reason: str = "",
) -> None:
    """Make ``user`` lead exactly the teams ``lead_of`` and a member of exactly
    ``member_of`` (team ids), from the user's side: each team whose people change gets
    its own MEMBERSHIP_CHANGED entry, as if edited on its page. Admins only."""
    require_admin(actor, "change teams")
    errors = Errors()
    for field, given in (("lead_of", lead_of), ("member_of", member_of)):
        if not isinstance(given, list | tuple) or not all(isinstance(t, int) for t in given):
            errors.add(field, "Give a list of team ids.")
    errors.raise_if_any()
    both = set(lead_of) & set(member_of)
    if both:
        names = sorted(Team.objects.filter(pk__in=both).values_list("name", flat=True))
        errors.add(
            "member_of",
            f"Lead or member, not both, of {', '.join(names)}: a lead has every member right.",
        )
    wanted = set(lead_of) | set(member_of)
    known = set(Team.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    if wanted - known:
        errors.add("lead_of", "No such team.")
    errors.raise_if_any()
    username = user.get_username()
    with transaction.atomic():
        current = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
        for team_id in sorted(known | set(current)):
            role = (
                MembershipRole.LEAD
                if team_id in lead_of
                else MembershipRole.MEMBER
                if team_id in member_of
                else None
            )
            if current.get(team_id) == role:
                continue
            team = Team.objects.get(pk=team_id)
            people = membership_snapshot(team)
            leads = [u for u in people["leads"] if u != username]
            members = [u for u in people["members"] if u != username]
            if role == MembershipRole.LEAD:
                leads.append(username)
            elif role == MembershipRole.MEMBER:
                members.append(username)
            team_update(
                actor=actor,
                team=team_id,
                changes={"leads": leads, "members": members},
                reason=reason,
            )
