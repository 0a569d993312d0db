"""Helpers shared by the run and test entry points."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from governance import embedded

ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """``$DATA_DIR``, else ``var/`` in the repository (the settings use the same rule)."""
    return Path(os.environ.get("DATA_DIR") or ROOT / "var").resolve()


def say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def services(env: MutableMapping[str, str], servers_dir: Path) -> Iterator[None]:
    """Make ``env`` name a database and a Redis for the duration of the block.

    ``DATABASE_URL`` / ``REDIS_URL`` already in ``env`` are used as they are. For a missing
    one the embedded server under ``servers_dir`` is started (or reused if it runs) and its
    URL put into ``env``; on exit, the servers this block started are stopped again.
    """
    started: list[str] = []
    try:
        if not env.get("DATABASE_URL"):
            say(f"embedded PostgreSQL under {servers_dir}")
            postgres = embedded.ensure_postgres(servers_dir)
            env["DATABASE_URL"] = postgres.url
            if postgres.started:
                started.append("postgres")
        if not env.get("REDIS_URL"):
            say(f"embedded Redis under {servers_dir}")
            redis = embedded.ensure_redis(servers_dir)
            env["REDIS_URL"] = redis.url
            if redis.started:
                started.append("redis")
        yield
    finally:
        if "redis" in started:
            say("stopping embedded Redis")
            embedded.stop_redis(servers_dir)
        if "postgres" in started:
            say("stopping embedded PostgreSQL")
            embedded.stop_postgres(servers_dir)
