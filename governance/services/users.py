"""Users and their site roles (the ``admin``, ``reviewer`` and ``agent`` groups).

The one way to create, change, give roles to and deactivate users: each function checks
that the actor is an admin (``actor=None`` is the system: the demo loader, management
commands), validates the whole input, writes and records the audit entry in one
transaction. ``/django-admin/`` shows users and groups read-only, so a role given there
cannot skip the trail. Team memberships change through ``services.teams``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import AbstractUser, Group
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from knox.models import AuthToken

from governance import roles
from governance.models import AuditEvent
from governance.roles import AnyUser
from governance.services import audit
from governance.services import teams as team_services
from governance.services.errors import Errors, NotFound, PermissionDenied, ValidationFailed
from governance.services.limits import valid_id

SITE_ROLES = (roles.ADMIN_GROUP, roles.REVIEWER_GROUP, roles.AGENT_GROUP)
USER_FIELDS = ("email", "first_name", "last_name", "password")


def _require_admin(actor: AnyUser | None, action: str) -> None:
    if actor is not None and not roles.is_admin(actor):
        raise PermissionDenied({"detail": [f"Only admins may {action}."]})


def user_roles(user: AbstractUser) -> list[str]:
    """The user's site roles, in ``SITE_ROLES`` order."""
    names = set(user.groups.values_list("name", flat=True))
    return [role for role in SITE_ROLES if role in names]


def user_snapshot(user: AbstractUser) -> dict[str, Any]:
    """The user as the audit trail records it (never the password)."""
    return audit.fields_of(
        user,
        "id",
        "email",
        "first_name",
        "last_name",
        "is_active",
        username=user.get_username(),
        roles=user_roles(user),
    )


def _team_actor(actor: AnyUser | None) -> AnyUser:
    """Team roles are given by an admin (``services.teams``); the system (None) has none."""
    if actor is None:
        raise ValidationFailed({"lead_of": ["Team roles are given by an admin, not the system."]})
    return actor


def _lock_user(user: AbstractUser | int) -> AbstractUser:
    user_id: Any = user if isinstance(user, int) else user.pk
    found = (
        get_user_model().objects.select_for_update().filter(pk=user_id).first()
        if valid_id(user_id)
        else None
    )
    if found is None:
        raise NotFound({"detail": [f"No user with id {user_id}."]})
    return found


def _clean_roles(given: Any, errors: Errors) -> list[str]:
    if not isinstance(given, list | tuple | set) or not all(isinstance(r, str) for r in given):
        errors.add("roles", f"Give a list of roles from: {', '.join(SITE_ROLES)}.")
        return []
    unknown = sorted(set(given) - set(SITE_ROLES))
    if unknown:
        errors.add(
            "roles", f"Unknown role(s) {', '.join(unknown)}; roles are: {', '.join(SITE_ROLES)}."
        )
    return [role for role in SITE_ROLES if role in given]


def _clean_text(values: Mapping[str, Any], field: str, limit: int, errors: Errors) -> None:
    value = values.get(field, "")
    if not isinstance(value, str):
        errors.add(field, "Must be text.")
    elif len(value) > limit:
        errors.add(field, f"At most {limit} characters.")


def _clean_fields(values: Mapping[str, Any], errors: Errors, user: Any) -> None:
    """Check email, names and (when given) the password against the validators."""
    email = values.get("email", "")
    if isinstance(email, str) and email:
        try:
            validate_email(email)
        except DjangoValidationError:
            errors.add("email", "Enter a valid email address.")
    _clean_text(values, "email", 254, errors)
    _clean_text(values, "first_name", 150, errors)
    _clean_text(values, "last_name", 150, errors)
    password = values.get("password")
    if password is not None:
        if not isinstance(password, str) or not password:
            errors.add("password", "Must be a non-empty text.")
        else:
            try:
                password_validation.validate_password(password, user)
            except DjangoValidationError as exc:
                for message in exc.messages:
                    errors.add("password", message)


def _set_roles(user: AbstractUser, wanted: Iterable[str]) -> None:
    groups = [Group.objects.get_or_create(name=name)[0] for name in wanted]
    user.groups.set(groups)
    # roles caches the user's groups on the object; this object must read them afresh.
    if hasattr(user, "_role_groups"):
        delattr(user, "_role_groups")


def user_create(
    *,
    actor: AnyUser | None,
    username: str,
    password: str | None = None,
    email: str = "",
    first_name: str = "",
    last_name: str = "",
    roles: Iterable[str] = (),
    reason: str = "",
    lead_of: list[int] | None = None,
    member_of: list[int] | None = None,
) -> AbstractUser:
    """Create a user (admins). Without a password the user signs in only after a password
    reset by email. Audited as USER_CREATED; teams given in ``lead_of`` / ``member_of``
    (ids) are joined in the same transaction (``teams.user_set_teams``)."""
    _require_admin(actor, "create users")
    User = get_user_model()
    errors = Errors()
    values = {"email": email, "first_name": first_name, "last_name": last_name}
    if password is not None:
        values["password"] = password
    if not isinstance(username, str) or not username.strip():
        errors.add("username", "A username is required.")
    else:
        username = username.strip()
        try:
            User.username_validator(username)
        except DjangoValidationError as exc:
            errors.add("username", " ".join(exc.messages))
        if len(username) > 150:
            errors.add("username", "At most 150 characters.")
        elif User.objects.filter(username__iexact=username).exists():
            errors.add("username", f"A user named {username!r} already exists.")
    _clean_fields(values, errors, User(username=username if isinstance(username, str) else ""))
    clean_roles = _clean_roles(list(roles) if not isinstance(roles, str) else roles, errors)
    errors.raise_if_any()
    with transaction.atomic():
        try:
            with transaction.atomic():
                user = User.objects.create_user(
                    username=username,
                    email=email,
                    password=password,
                    first_name=first_name,
                    last_name=last_name,
                )
        except IntegrityError as exc:  # a concurrent create took the name
            raise ValidationFailed({"username": [f"A user named {username!r} exists."]}) from exc
        _set_roles(user, clean_roles)
        audit.record(
            event_type=AuditEvent.USER_CREATED,
            actor=actor,
            subject=user,
            after=user_snapshot(user),
            reason=reason,
        )
        if lead_of or member_of:
            team_services.user_set_teams(
                actor=_team_actor(actor),
                user=user,
                lead_of=lead_of or [],
                member_of=member_of or [],
                reason=reason,
            )
    return user


def user_update(
    *, actor: AnyUser | None, user: AbstractUser | int, changes: Mapping[str, Any], reason: str = ""
) -> AbstractUser:
    """Change a user's email, names or password (admins; everyone for their own names and
    email). Audited as USER_UPDATED; a new password shows as ``"password": "changed"`` and
    revokes the user's API tokens and signs out their sessions (``_revoke_credentials``)."""
    unknown = sorted(set(changes) - set(USER_FIELDS))
    if unknown:
        raise ValidationFailed({field: ["This field cannot be changed."] for field in unknown})
    with transaction.atomic():
        locked = _lock_user(user)
        own = actor is not None and actor.is_authenticated and actor.pk == locked.pk
        if not (own and "password" not in changes):
            _require_admin(actor, "change other users")
        errors = Errors()
        _clean_fields(changes, errors, locked)
        errors.raise_if_any()
        before = user_snapshot(locked)
        for field in ("email", "first_name", "last_name"):
            if field in changes:
                setattr(locked, field, changes[field])
        if "password" in changes:
            locked.set_password(changes["password"])
        locked.save()
        after = user_snapshot(locked)
        if "password" in changes:
            before["password"], after["password"] = "", "changed"
            after.update(_revoke_credentials(locked))
        if before != after:
            audit.record(
                event_type=AuditEvent.USER_UPDATED,
                actor=actor,
                subject=locked,
                before=before,
                after=after,
                reason=reason,
            )
    return locked


def _revoke_credentials(user: AbstractUser) -> dict[str, Any]:
    """After a new password: every API token of the user is deleted, and every session
    signed in with the old password ends at its next request (Django checks each session
    against a hash of the password it was opened with). Returned for the audit entry."""
    revoked, _ = AuthToken.objects.filter(user=user).delete()
    return {"tokens_revoked": revoked, "sessions": "signed out"}


def user_reset_password(
    *, user: AbstractUser | int, password: str, reason: str = "Password reset by email."
) -> AbstractUser:
    """Set a password through the emailed reset link: the link's token proved the actor is
    the user, so the user is the actor. The password passes the validators; the user's
    API tokens are revoked and their sessions signed out. Audited as USER_UPDATED with
    ``"password": "reset"``."""
    with transaction.atomic():
        locked = _lock_user(user)
        errors = Errors()
        _clean_fields({"password": password}, errors, locked)
        errors.raise_if_any()
        locked.set_password(password)
        locked.save(update_fields=["password"])
        audit.record(
            event_type=AuditEvent.USER_UPDATED,
            actor=locked,
            subject=locked,
            before={"password": ""},
            after={"password": "reset", **_revoke_credentials(locked)},
            reason=reason,
        )
    return locked


def user_set_roles(
    *, actor: AnyUser | None, user: AbstractUser | int, roles: Iterable[str], reason: str = ""
) -> AbstractUser:
    """Give a user exactly these site roles (admins). An admin cannot drop their own admin
    role (someone must be left to give it back). Audited as USER_ROLES_CHANGED."""
    _require_admin(actor, "change roles")
    errors = Errors()
    clean = _clean_roles(list(roles) if not isinstance(roles, str) else roles, errors)
    errors.raise_if_any()
    with transaction.atomic():
        locked = _lock_user(user)
        before = user_roles(locked)
        if (
            actor is not None
            and actor.pk == locked.pk
            and roles_admin(before)
            and not roles_admin(clean)
        ):
            raise ValidationFailed({"roles": ["You cannot take away your own admin role."]})
        if before == clean:
            return locked
        _set_roles(locked, clean)
        audit.record(
            event_type=AuditEvent.USER_ROLES_CHANGED,
            actor=actor,
            subject=locked,
            before={"roles": before},
            after={"roles": clean},
            reason=reason,
        )
    return locked


def roles_admin(names: Iterable[str]) -> bool:
    return roles.ADMIN_GROUP in names


def _set_active(
    *, actor: AnyUser | None, user: AbstractUser | int, active: bool, reason: str
) -> AbstractUser:
    """Switch ``is_active``; deactivating revokes every API token at once."""
    with transaction.atomic():
        locked = _lock_user(user)
        if not active and actor is not None and actor.is_authenticated and actor.pk == locked.pk:
            raise ValidationFailed({"detail": ["You cannot deactivate yourself."]})
        if locked.is_active == active:
            return locked
        before = user_snapshot(locked)
        locked.is_active = active
        locked.save(update_fields=["is_active"])
        after = user_snapshot(locked)
        if not active:
            after["tokens_revoked"], _ = AuthToken.objects.filter(user=locked).delete()
        audit.record(
            event_type=AuditEvent.USER_REACTIVATED if active else AuditEvent.USER_DEACTIVATED,
            actor=actor,
            subject=locked,
            before=before,
            after=after,
            reason=reason,
        )
    return locked


def user_deactivate(
    *, actor: AnyUser | None, user: AbstractUser | int, reason: str = ""
) -> AbstractUser:
    """Deactivate a user (admins): no sign-in, and every API token revoked at once. Their
    history (jobs, audit entries) stays. Audited as USER_DEACTIVATED."""
    _require_admin(actor, "deactivate users")
    return _set_active(actor=actor, user=user, active=False, reason=reason)


def user_reactivate(
    *, actor: AnyUser | None, user: AbstractUser | int, reason: str = ""
) -> AbstractUser:
    """Let a deactivated user sign in again (admins). Audited as USER_REACTIVATED."""
    _require_admin(actor, "reactivate users")
    return _set_active(actor=actor, user=user, active=True, reason=reason)


def user_edit(
    *,
    actor: AnyUser | None,
    user: AbstractUser | int,
    changes: Mapping[str, Any],
    roles: Iterable[str],
    active: bool,
    reason: str = "",
    lead_of: list[int] | None = None,
    member_of: list[int] | None = None,
) -> AbstractUser:
    """What the admin's user page saves at once (admins): fields, site roles, the teams
    they lead or belong to (ids; both None leaves them) and whether the user may sign in, in
    one transaction, so a refused part leaves nothing half-done. Each part keeps its own
    audit entry (USER_UPDATED, USER_ROLES_CHANGED, MEMBERSHIP_CHANGED per team,
    USER_DEACTIVATED / USER_REACTIVATED) carrying the same reason."""
    _require_admin(actor, "change users")
    if not isinstance(active, bool):
        raise ValidationFailed({"active": ["Must be true or false."]})
    with transaction.atomic():
        locked = user_update(actor=actor, user=user, changes=changes, reason=reason)
        locked = user_set_roles(actor=actor, user=locked, roles=roles, reason=reason)
        if lead_of is not None or member_of is not None:
            team_services.user_set_teams(
                actor=_team_actor(actor),
                user=locked,
                lead_of=lead_of or [],
                member_of=member_of or [],
                reason=reason,
            )
        if active:
            locked = user_reactivate(actor=actor, user=locked, reason=reason)
        else:
            locked = user_deactivate(actor=actor, user=locked, reason=reason)
    return locked
