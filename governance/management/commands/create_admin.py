"""``manage.py create_admin USERNAME``: the first admin of an empty installation.

Through the user service, like every other user, so the admin is in the admin role and
the audit trail records their creation (``createsuperuser`` would leave no entry). Every
later user, team and queue is made in the browser (docs/admin-guide.md).
"""

from __future__ import annotations

import getpass
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from governance.roles import ADMIN_GROUP
from governance.services import users as user_services
from governance.services.errors import ServiceError


class Command(BaseCommand):
    help = "Create an admin (password from ADMIN_PASSWORD or asked twice)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get("ADMIN_PASSWORD") or self._ask()
        try:
            user = user_services.user_create(
                actor=None,
                username=options["username"],
                password=password,
                email=options["email"],
                roles=[ADMIN_GROUP],
                reason="The first admin, created with manage.py create_admin.",
            )
        except ServiceError as error:
            lines = [f"{field}: {m}" for field, ms in error.errors.items() for m in ms]
            raise CommandError("\n".join(lines)) from error
        self.stdout.write(self.style.SUCCESS(f"Admin {user.get_username()} created."))

    def _ask(self) -> str:
        first = getpass.getpass("Password: ")
        if first != getpass.getpass("Password (again): "):
            raise CommandError("The two passwords differ.")
        return first
