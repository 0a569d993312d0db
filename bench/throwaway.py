"""The throwaway database every bench that writes runs in.

``throwaway_database("bench_x")`` drops and re-creates ``bench_x_<name>`` on the
``DATABASE_URL`` server, ``<name>`` being that URL's database name (so people sharing a
server never drop each other's bench), or plain ``bench_x`` when the name is empty,
``postgres`` or not a plain identifier. Benches run as ``python bench/<bench>.py``, which
puts this folder on ``sys.path``.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit, urlunsplit


def throwaway_database(prefix: str) -> tuple[str, str]:
    """Drop and re-create the bench's database; return its name and URL."""
    base = os.environ.get("DATABASE_URL")
    if not base:
        sys.exit("set DATABASE_URL to a PostgreSQL server (its database name names the bench DB)")
    parts = urlsplit(base)
    given = parts.path.strip("/")
    name = prefix
    if given and given != "postgres" and given.replace("_", "").isalnum():
        name = f"{prefix}_{given}"
    import psycopg

    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return name, urlunsplit(parts._replace(path=f"/{name}"))


def django_on_throwaway(prefix: str, **env: str) -> tuple[str, str]:
    """Point this process at the bench's throwaway database (``throwaway_database``), with
    Django's settings, warnings-only logs and ``env`` on top, set Django up and migrate;
    returns the database's name and URL. Before anything imports Django's settings."""
    name, url = throwaway_database(prefix)
    os.environ.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="governance.settings",
        LOG_LEVEL="WARNING",
        **env,
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return name, url
