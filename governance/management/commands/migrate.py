"""``manage.py migrate`` as the tables' owner (docs/operations.md, "Database roles").

The product connects as ``DATABASE_APP_ROLE``, which may not create or alter tables nor
change the audit trail. Migrations run as the owner: with ``DATABASE_OWNER_URL`` set
(the embedded default sets it), this command connects with its user and password, to the
database ``DATABASE_URL`` names, then runs Django's own ``migrate``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.commands import migrate
from django.db import connections


class Command(migrate.Command):
    help = f"{migrate.Command.help} Connects as the owner given by DATABASE_OWNER_URL."

    def handle(self, *args: Any, **options: Any) -> None:
        owner = settings.DATABASE_OWNER
        if not owner:
            super().handle(*args, **options)
            return
        connection = connections[options["database"]]
        kept = {key: connection.settings_dict[key] for key in ("USER", "PASSWORD")}
        connection.close()
        connection.settings_dict.update(USER=owner["USER"], PASSWORD=owner["PASSWORD"])
        try:
            super().handle(*args, **options)
        finally:
            connection.close()
            connection.settings_dict.update(kept)
