"""``manage.py migrate`` connects as the tables' owner (``DATABASE_OWNER_URL``) and hands
the connection back to the product's role afterwards (docs/operations.md, "Database
roles"); without an owner URL it runs as it always did."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.commands import migrate as django_migrate
from django.db import connections


@pytest.fixture
def migrations_seen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Django's own migrate, replaced by a recorder of who it would connect as."""
    seen: list[str] = []

    def record(self: Any, *args: Any, **options: Any) -> None:
        seen.append(connections[options["database"]].settings_dict["USER"])

    monkeypatch.setattr(django_migrate.Command, "handle", record)
    return seen


def test_migrate_runs_as_the_owner_and_gives_the_connection_back(
    settings: Any, migrations_seen: list[str]
) -> None:
    product = connections["default"].settings_dict["USER"]
    settings.DATABASE_OWNER = {"USER": "governance_owner", "PASSWORD": "owner-secret"}
    call_command("migrate", verbosity=0)
    assert migrations_seen == ["governance_owner"]
    assert connections["default"].settings_dict["USER"] == product
    assert connections["default"].settings_dict["PASSWORD"] != "owner-secret"


def test_without_an_owner_url_migrate_connects_as_configured(
    settings: Any, migrations_seen: list[str]
) -> None:
    settings.DATABASE_OWNER = None
    call_command("migrate", verbosity=0)
    assert migrations_seen == [connections["default"].settings_dict["USER"]]
