"""``manage.py create_admin``: the first admin of an empty installation, audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from governance import roles
from governance.models import AuditEntry, AuditEvent

pytestmark = pytest.mark.django_db


def test_create_admin_makes_an_audited_admin(monkeypatch: Any) -> None:
    monkeypatch.setenv("ADMIN_PASSWORD", "first-admin-pass-phrase")
    call_command("create_admin", "ada", "--email", "ada@example.com")
    ada = get_user_model().objects.get(username="ada")
    assert roles.is_admin(ada) and ada.check_password("first-admin-pass-phrase")
    entry = AuditEntry.objects.get(event_type=AuditEvent.USER_CREATED)
    assert entry.after["roles"] == ["admin"] and entry.actor is None


def test_create_admin_refuses_a_weak_password_and_creates_nothing(monkeypatch: Any) -> None:
    monkeypatch.setenv("ADMIN_PASSWORD", "123")
    with pytest.raises(CommandError, match="password"):
        call_command("create_admin", "ada")
    assert not get_user_model().objects.filter(username="ada").exists()
    assert not AuditEntry.objects.exists()
