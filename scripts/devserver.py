"""Run the product with demo data: ``./scripts/run`` (after the venv bootstrap).

1. database and Redis: ``DATABASE_URL`` / ``REDIS_URL`` if set, else the embedded servers
   under ``DATA_DIR`` (started here, or reused when already running);
2. ``manage.py migrate``, ``manage.py load_demo`` (which skips data already loaded; not
   with ``DEMO=0``, an empty installation) and
   ``manage.py collectstatic`` (into ``staticfiles/``, served by whitenoise);
3. supervisor (``supervisord``, configuration written to ``DATA_DIR/supervisord.conf``)
   runs the web server (gunicorn on ``$HOST``:``$PORT``, default 127.0.0.1:8000: this
   machine only), ``$WORKERS`` Celery workers (default 2), a worker of the what-if queue
   and Celery beat, and restarts any of them that exits: at once after a
   crash, then after 1, 2, 3 ... seconds while it keeps failing within 3 s of its start.
   Each restart is logged;
4. its log and each program's log (``DATA_DIR/logs/``) are printed with a name prefix;
5. only Ctrl-C / SIGTERM stops it all: supervisor stops them (their whole process
   groups), then the embedded servers started in step 1 are stopped.

Why supervisor: it is the long-standing process manager for exactly this (restart with
backoff, log rotation, process groups, ``supervisorctl status / restart / pid``), runs as
a plain Python program from the venv, and keeps the restart policy out of our code.
Honcho and the like stop everything when one process exits, which is what must not happen.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO

from governance import embedded
from scripts.common import ROOT, data_dir, say, services

STOP_GRACE_SECONDS = 40.0  # supervisor's own grace per program (15 s) and margin
WEB_START_TIMEOUT_SECONDS = 120.0
DEFAULT_WORKERS = 2
PR_SET_PDEATHSIG = 1


class Shutdown(Exception):
    """Raised by the signal handler to unwind to the cleanup code."""


# --- supervisor's configuration --------------------------------------------------------


def _ini(value: str | Path) -> str:
    """A value for supervisor's configuration file, which expands ``%(name)s``."""
    return str(value).replace("%", "%%")


def control_socket(var: Path) -> Path:
    """supervisorctl's socket: in ``var``, unless that path is too long for a unix socket."""
    path = var / "supervisor.sock"
    if len(str(path)) < 100:
        return path
    import hashlib
    import tempfile

    digest = hashlib.sha256(str(var).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"governance-supervisor-{digest}.sock"


def worker_count(env: dict[str, str]) -> int:
    """``WORKERS``: how many Celery workers supervisor runs (default 2, at least 1).

    Two workers of one pool process each do the work of one worker of two, and a crashed
    one leaves the other scheduling while supervisor brings it back.
    """
    text = env.get("WORKERS", str(DEFAULT_WORKERS))
    if not text.isdecimal() or int(text) < 1:
        raise ValueError(f"WORKERS: expected a number of workers (1 or more), got {text!r}")
    return int(text)


def process_names(env: dict[str, str]) -> list[str]:
    """The supervised processes, as supervisor names them (and their log files)."""
    return ["web", *(f"worker-{n}" for n in range(worker_count(env))), "whatif", "beat"]


def program_commands(var: Path, env: dict[str, str]) -> dict[str, list[str]]:
    """The command line of each supervised program."""
    python = sys.executable
    concurrency = env.get("WORKER_CONCURRENCY", "1")
    worker = [python, "-m", "celery", "-A", "governance", "worker", "--loglevel", "WARNING"]
    # Gossip, mingle and heartbeat serve clusters of workers that watch one another;
    # without them a broker outage cannot end the worker (governance/celery.py).
    alone = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    return {
        "web": [python, "-m", "gunicorn", "-c", str(ROOT / "scripts" / "gunicorn_conf.py"),
                "governance.wsgi"],
        # Scheduling cycles and the other tasks: Celery's default queue only.
        "worker": [*worker, "--queues", "celery", "--concurrency", concurrency, *alone],
        # What-if replays (minutes of CPU each) on their own queue and worker, so that
        # they never hold up a cycle (settings.WHATIF_QUEUE).
        "whatif": [*worker, "--queues", env.get("WHATIF_QUEUE", "whatif"), "--concurrency",
                   "1", "--hostname", "whatif@%h", *alone],
        "beat": [python, "-m", "celery", "-A", "governance", "beat", "--loglevel", "WARNING",
                 "--schedule", str(var / "celerybeat-schedule")],
    }  # fmt: skip


def supervisor_config(var: Path, env: dict[str, str]) -> str:
    """supervisord's configuration: the programs, restarted whenever they exit."""
    logs = var / "logs"
    sock = control_socket(var)
    # supervisorctl reads the same file (mode 0600): only this user can control the programs.
    password = secrets.token_hex(16)
    lines = [
        "; Written by ./scripts/run at each start (scripts/devserver.py); edits are lost.",
        "[supervisord]",
        "nodaemon=true",
        # Its log goes to the file only (echoed by this script): a pipe to this script
        # would break if the script died, and supervisord with it, orphaning the programs.
        "silent=true",
        f"logfile={_ini(logs / 'supervisord.log')}",
        "logfile_maxbytes=10MB",
        "logfile_backups=3",
        "loglevel=info",
        f"pidfile={_ini(var / 'supervisord.pid')}",
        f"childlogdir={_ini(logs)}",
        f"directory={_ini(ROOT)}",
        f"user={os.getuid()}",
        "",
        "[unix_http_server]",
        f"file={_ini(sock)}",
        "chmod=0700",
        "username=governance",
        f"password={password}",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        "",
        "[supervisorctl]",
        f"serverurl=unix://{_ini(sock)}",
        "username=governance",
        f"password={password}",
    ]
    for name, command in program_commands(var, env).items():
        line = "command=" + " ".join(_ini(_quote(part)) for part in command)
        log_name = name
        if name == "worker":
            # worker-0, worker-1, ...: each its own Celery node name and log file.
            line += " --hostname worker-%(process_num)d@%%h"
            log_name = "worker-%(process_num)d"
            lines += ["", f"[program:{name}]", f"numprocs={worker_count(env)}"]
            lines += ["process_name=%(program_name)s-%(process_num)d"]
        else:
            lines += ["", f"[program:{name}]"]
        lines += [
            line,
            f"directory={_ini(ROOT)}",
            "autostart=true",
            # Restart whatever the exit status: only `supervisorctl stop` or Ctrl-C stops it.
            "autorestart=true",
            # Up 3 s = started. A program that exits sooner is retried after 1, 2, 3 ... s
            # (supervisor's backoff); one that ran longer is restarted at once.
            "startsecs=3",
            "startretries=1000",
            "stopsignal=TERM",
            "stopwaitsecs=15",
            # Signals go to the whole group: gunicorn's and Celery's child processes too.
            "stopasgroup=true",
            "killasgroup=true",
            "redirect_stderr=true",
            f"stdout_logfile={_ini(logs)}/{log_name}.log",
            "stdout_logfile_maxbytes=10MB",
            "stdout_logfile_backups=3",
        ]
    return "\n".join(lines) + "\n"


def _quote(part: str) -> str:
    # supervisor splits the command with shlex: quote what has spaces.
    import shlex

    return shlex.quote(part)


# --- output ----------------------------------------------------------------------------


class Follower(threading.Thread):
    """Prints the lines appended to a log file with a name prefix, across rotations."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(daemon=True)
        self.prefix = f"{name:<10}| ".encode()
        self.path = path
        self.position = path.stat().st_size if path.exists() else 0
        self.done = threading.Event()

    def run(self) -> None:
        handle: IO[bytes] | None = None
        inode = None
        partial = b""
        while True:
            if handle is None:
                try:
                    handle = self.path.open("rb")
                except FileNotFoundError:
                    if self.done.wait(0.2):
                        return
                    continue
                inode = os.fstat(handle.fileno()).st_ino
                handle.seek(self.position)
            chunk = handle.readline()
            if chunk:
                partial += chunk
                if partial.endswith(b"\n"):
                    sys.stdout.buffer.write(self.prefix + partial)
                    sys.stdout.buffer.flush()
                    partial = b""
                continue
            if self.done.is_set():
                handle.close()
                return
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_ino != inode or self.path.stat().st_size < handle.tell():
                    handle.close()  # rotated by supervisor: the new file starts at 0
                    handle, self.position = None, 0
                    continue
            time.sleep(0.2)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=2)


# --- supervisord -----------------------------------------------------------------------


def _die_with_parent() -> None:
    """In supervisord's process: get SIGTERM should this script die without cleaning up."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def running_supervisord(var: Path) -> int | None:
    """The pid of a supervisord still running from an earlier run in ``var``, else None."""
    try:
        pid = int((var / "supervisord.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"supervisord" in command else None


def start_supervisord(var: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    (var / "logs").mkdir(parents=True, exist_ok=True)
    config = var / "supervisord.conf"
    config.touch(mode=0o600)
    config.chmod(0o600)
    config.write_text(supervisor_config(var, env))
    return subprocess.Popen(
        [sys.executable, "-m", "supervisor.supervisord", "-c", str(config)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        # Inherited, for what it says before its log is open (a bad configuration).
        stdout=None,
        stderr=None,
        # A session of its own: Ctrl-C reaches only this script, which then stops it.
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def stop_supervisord(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM: supervisord stops each program (SIGTERM, SIGKILL after 15 s), then exits."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        say(f"supervisor did not stop in {STOP_GRACE_SECONDS:.0f}s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def listen_host(env: dict[str, str]) -> str:
    """``HOST``: the address the web server listens on, this machine only by default (the
    demo's logins are public knowledge). ``HOST=0.0.0.0`` opens it to the network."""
    return env.get("HOST") or "127.0.0.1"


def run_env(environ: dict[str, str], var: Path, port: int) -> dict[str, str]:
    """The environment of every program ``./scripts/run`` starts: the web server binds
    ``WEB_BIND`` (scripts/gunicorn_conf.py), set here from ``HOST``."""
    return dict(
        environ,
        PYTHONUNBUFFERED="1",
        DATA_DIR=str(var),
        PORT=str(port),
        WEB_BIND=listen_host(environ),
    )


def as_product_role(env: dict[str, str], var: Path) -> None:
    """On the embedded database: migrations connect as its owner (``postgres``), every
    program as the product's own role, which may only read and append to the audit trail
    (docs/operations.md, "Database roles")."""
    env["DATABASE_OWNER_URL"] = env["DATABASE_URL"]
    role = env.get("DATABASE_APP_ROLE") or "governance_app"
    env["DATABASE_URL"] = embedded.app_database_url(var, role)


def _reach(host: str) -> str:
    """Where this script reaches a server listening on ``host``."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def wait_for_port(host: str, port: int, supervisord: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WEB_START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if supervisord.poll() is not None:
            raise RuntimeError(f"supervisor exited with status {supervisord.returncode}")
        try:
            with socket.create_connection((_reach(host), port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the web server did not listen on port {port} in time")


def banner(host: str, port: int, var: Path, *, with_demo: bool = True) -> None:
    shown = "localhost" if host in LOOPBACK else f"[{host}]" if ":" in host else host
    lines = [f"GPU share governance is running at http://{shown}:{port}/"]
    logins_file = var / "demo_logins.txt"
    if logins_file.exists() and with_demo:
        lines.append("Demo logins, for a local demo only (their passwords are their names):")
        lines += [f"  {line}" for line in logins_file.read_text().splitlines() if line.strip()]
        if host not in LOOPBACK:
            lines.append(
                f"WARNING: HOST={host} lets other machines reach these logins; use them "
                "only on a network you trust, or start with DEMO=0 and create real users."
            )
    if not with_demo:
        lines += first_admin_hint(var)
    lines.append(f"Processes: .venv/bin/supervisorctl -c {var / 'supervisord.conf'} status")
    lines.append("Press Ctrl-C to stop everything.")
    width = max(len(line) for line in lines)
    print("\n" + "=" * width, *lines, "=" * width + "\n", sep="\n", flush=True)


def first_admin_hint(var: Path) -> list[str]:
    """How to make the first admin of an empty installation (DEMO=0), as the sign-in page
    also says while nobody can sign in (docs/admin-guide.md)."""
    return [
        "Empty installation: nobody can sign in until the first admin exists. In another",
        "shell (docs/admin-guide.md):",
        f"  DATA_DIR={var} .venv/bin/python manage.py create_admin NAME --email EMAIL",
    ]


def on_signal(signum: int, frame: FrameType | None) -> None:
    # Later signals during cleanup are ignored, so that the cleanup finishes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Shutdown(signal.Signals(signum).name)


def main() -> int:
    port_text = os.environ.get("PORT", "8000")
    if not port_text.isdecimal() or not 0 < int(port_text) < 65536:
        say(f"PORT: expected a port number, got {port_text!r}")
        return 2
    port = int(port_text)
    try:
        worker_count(dict(os.environ))
    except ValueError as exc:
        say(str(exc))
        return 2
    var = data_dir()
    var.mkdir(parents=True, exist_ok=True)
    earlier = running_supervisord(var)
    if earlier is not None:
        say(
            f"error: the product already runs from {var} (supervisord pid {earlier}); stop it "
            f"with Ctrl-C there, or: .venv/bin/supervisorctl -c {var / 'supervisord.conf'} "
            "shutdown"
        )
        return 1
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    env = run_env(dict(os.environ), var, port)
    host = env["WEB_BIND"]
    # DEMO=0: an empty installation (docs/admin-guide.md), no demo data and no activity.
    with_demo = env.get("DEMO", "1") != "0"
    # The demo keeps working: teams submit, capacity comes and goes (docs/operations.md).
    env.setdefault("DEMO_ACTIVITY_SECONDS", "20" if with_demo else "0")
    # Behind gunicorn and on the worker a kept connection saves its setup on every request;
    # health checks replace one that a PostgreSQL restart broke.
    env.setdefault("DB_CONN_MAX_AGE", "60")
    manage = [sys.executable, "manage.py"]
    slurm_hook = ROOT / "scripts" / "slurm" / "hook"
    with_slurm = env.get("DEMO_SLURM", "").lower() in ("1", "true", "yes", "on")
    if with_slurm:
        # The demo's Slurm queue runs on the local Slurm (docs/slurm.md), whose node
        # epilogs call this product when a job ends (the completion hook).
        say("starting the local Slurm (scripts/slurm/start)")
        subprocess.run([str(ROOT / "scripts" / "slurm" / "start")], cwd=ROOT, check=True)
        env.setdefault("SLURM_CONF", str(ROOT / "var" / "slurm" / "slurm.conf"))
        env.setdefault("SLURM_HOOK_TOKEN", secrets.token_urlsafe(24))
        hook_url = f"http://127.0.0.1:{port}/api/slurm/job-ended/"
        subprocess.run([str(slurm_hook), hook_url, env["SLURM_HOOK_TOKEN"]], cwd=ROOT, check=True)
    supervisord: subprocess.Popen[bytes] | None = None
    followers: list[Follower] = []
    embedded_database = not env.get("DATABASE_URL")
    try:
        with services(env, var):
            if embedded_database:
                as_product_role(env, var)
            elif not env.get("DATABASE_OWNER_URL"):
                say(
                    "WARNING: no DATABASE_OWNER_URL: the product connects as the owner of its "
                    "tables and could change the audit trail; run it as its own role "
                    "(docs/operations.md, 'Database roles')"
                )
            try:
                say("migrating the database")
                subprocess.run([*manage, "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
                if with_demo:
                    say("loading the demo data (skipped when present)")
                    subprocess.run([*manage, "load_demo"], cwd=ROOT, env=env, check=True)
                say("collecting static files")
                subprocess.run(
                    [*manage, "collectstatic", "--noinput", "--verbosity", "0"],
                    cwd=ROOT,
                    env=env,
                    check=True,
                )
                followers = [Follower("supervisor", var / "logs" / "supervisord.log")]
                followers += [
                    Follower(name, var / "logs" / f"{name}.log") for name in process_names(env)
                ]
                say("starting the web server, workers and beat under supervisor")
                supervisord = start_supervisord(var, env)
                for follower in followers:
                    follower.start()
                wait_for_port(host, port, supervisord)
                banner(host, port, var, with_demo=with_demo)
                while supervisord.poll() is None:
                    time.sleep(0.5)
                raise RuntimeError(f"supervisor exited with status {supervisord.returncode}")
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                if supervisord is not None:
                    say("stopping the web server, workers and beat")
                    stop_supervisord(supervisord)
                for follower in followers:
                    follower.stop()
                if with_slurm:
                    subprocess.run([str(slurm_hook), "--off"], cwd=ROOT, check=False)
    except Shutdown as signal_name:
        say(f"{signal_name}: stopped")
        return 0
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        say(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
