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
