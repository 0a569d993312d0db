"""Users and site roles change only through audited services; the admin is read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from knox.models import AuthToken

from governance import roles
from governance.models import AuditEntry, AuditEvent
from governance.services import users
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.factories import UserFactory, make_admin

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin() -> Any:
    return make_admin("boss")


def entries(event: AuditEvent) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(event_type=event).order_by("id"))


def test_create_with_roles_is_audited(admin: Any) -> None:
    user = users.user_create(
        actor=admin, username="newbie", email="n@example.org", roles=["reviewer", "agent"]
    )
    assert users.user_roles(user) == ["reviewer", "agent"]
    assert not user.has_usable_password()
    [entry] = entries(AuditEvent.USER_CREATED)
    assert entry.actor_id == admin.pk
    assert entry.after["roles"] == ["reviewer", "agent"]
    assert "password" not in entry.after


def test_create_validates_every_field_at_once(admin: Any) -> None:
    UserFactory(username="taken")
    with pytest.raises(ValidationFailed) as caught:
        users.user_create(
            actor=admin,
            username="TAKEN",
            email="not-an-email",
            password="123",
            roles=["admin", "wizard"],
        )
    assert {"username", "email", "password", "roles"} <= set(caught.value.errors)
    assert not entries(AuditEvent.USER_CREATED)


def test_only_admins_manage_users(admin: Any) -> None:
    plain = UserFactory(username="plain")
    with pytest.raises(PermissionDenied):
        users.user_create(actor=plain, username="x")
    with pytest.raises(PermissionDenied):
        users.user_set_roles(actor=plain, user=plain, roles=["admin"])
    with pytest.raises(PermissionDenied):
        users.user_deactivate(actor=plain, user=admin)
    with pytest.raises(PermissionDenied):
        users.user_update(actor=plain, user=admin, changes={"first_name": "x"})
    assert not roles.is_admin(get_user_model().objects.get(pk=plain.pk))


def test_users_change_their_own_names_but_not_their_password_here(admin: Any) -> None:
    plain = UserFactory(username="plain")
    users.user_update(actor=plain, user=plain, changes={"first_name": "Pat"})
    with pytest.raises(PermissionDenied):
        users.user_update(actor=plain, user=plain, changes={"password": "a-long-passphrase"})
    [entry] = entries(AuditEvent.USER_UPDATED)
    assert (entry.before["first_name"], entry.after["first_name"]) == ("", "Pat")


def test_set_roles_is_audited_and_admins_keep_their_own(admin: Any) -> None:
    user = UserFactory(username="r")
    users.user_set_roles(actor=admin, user=user, roles=["reviewer"])
    [entry] = entries(AuditEvent.USER_ROLES_CHANGED)
    assert (entry.before, entry.after) == ({"roles": []}, {"roles": ["reviewer"]})
    assert roles.is_reviewer(get_user_model().objects.get(pk=user.pk))
    with pytest.raises(ValidationFailed):
        users.user_set_roles(actor=admin, user=admin, roles=[])


def test_deactivate_revokes_tokens(admin: Any) -> None:
    user = UserFactory(username="leaving")
    AuthToken.objects.create(user=user)
    users.user_deactivate(actor=admin, user=user, reason="left the company")
    user.refresh_from_db()
    assert not user.is_active
    assert not AuthToken.objects.filter(user=user).exists()
    [entry] = entries(AuditEvent.USER_DEACTIVATED)
    assert entry.reason == "left the company" and entry.after["tokens_revoked"] == 1
    with pytest.raises(ValidationFailed):
        users.user_deactivate(actor=admin, user=admin)
    users.user_reactivate(actor=admin, user=user)
    assert get_user_model().objects.get(pk=user.pk).is_active


def test_django_admin_is_read_only_for_users_and_groups() -> None:
    superuser = UserFactory(username="root")
    superuser.is_staff = superuser.is_superuser = True
    superuser.save()
    target = UserFactory(username="target")
    client = Client()
    client.force_login(superuser)
    assert client.get(f"/django-admin/auth/user/{target.pk}/change/").status_code == 200
    assert client.get("/django-admin/auth/user/add/").status_code == 403
    assert client.get("/django-admin/auth/group/add/").status_code == 403
    response = client.post(
        f"/django-admin/auth/user/{target.pk}/change/",
        {"username": "target", "is_superuser": "on", "is_staff": "on"},
    )
    assert response.status_code == 403
    assert not get_user_model().objects.get(pk=target.pk).is_superuser


def test_an_admin_setting_a_password_revokes_tokens_and_sessions(admin: Any) -> None:
    user = UserFactory(username="pat", password="old-long-passphrase")
    AuthToken.objects.create(user=user)
    AuthToken.objects.create(user=user)
    browser = Client()
    signed_in = browser.post("/login/", {"username": "pat", "password": "old-long-passphrase"})
    assert signed_in.status_code == 302
    assert browser.get("/").status_code == 200
    users.user_update(actor=admin, user=user, changes={"password": "a-new-long-passphrase"})
    assert not AuthToken.objects.filter(user=user).exists()
    assert browser.get("/").status_code == 302  # signed out
    [entry] = entries(AuditEvent.USER_UPDATED)
    assert entry.after["password"] == "changed" and entry.after["tokens_revoked"] == 2
