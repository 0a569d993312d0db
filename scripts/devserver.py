"""Run the product with demo data: ``./scripts/run`` (after the venv bootstrap).

1. database and Redis: ``DATABASE_URL`` / ``REDIS_URL`` if set, else the embedded servers
   under ``DATA_DIR`` (started here, or reused when already running);
2. ``manage.py migrate`` and ``manage.py load_demo`` (which skips data already loaded);
3. the web server on ``$PORT`` (default 8000), a Celery worker and Celery beat, their
   output interleaved with a name prefix;
4. on Ctrl-C / SIGTERM, or when one of them exits: every child process group is
   terminated, and the embedded servers started in step 1 are stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from scripts.common import ROOT, data_dir, say, services

STOP_GRACE_SECONDS = 15.0
WEB_START_TIMEOUT_SECONDS = 120.0


class Shutdown(Exception):
    """Raised by the signal handler to unwind to the cleanup code."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    pump: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.pump = threading.Thread(target=self._copy_output, daemon=True)
        self.pump.start()

    def _copy_output(self) -> None:
        stream: IO[bytes] | None = self.process.stdout
        assert stream is not None
        prefix = f"{self.name:<6}| ".encode()
        for line in iter(stream.readline, b""):
            sys.stdout.buffer.write(prefix + line)
            sys.stdout.buffer.flush()

    def terminate(self) -> None:
        """SIGTERM the child's whole process group (runserver's reloader, worker pool)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def start(name: str, command: list[str], env: dict[str, str]) -> Child:
    # A session of its own: Ctrl-C reaches only this script, which then stops the group.
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Child(name, process)


def stop(children: list[Child]) -> None:
    for child in children:
        child.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in children:
        try:
            child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{child.name} did not stop in {STOP_GRACE_SECONDS:.0f}s; killing it")
        child.kill()  # also takes down any straggler left in the group
        child.process.wait()
        child.pump.join(timeout=2)


def wait_for_port(port: int, children: list[Child]) -> None:
    deadline = time.monotonic() + WEB_START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        check_alive(children)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the web server did not listen on port {port} in time")


def check_alive(children: list[Child]) -> None:
    for child in children:
        code = child.process.poll()
        if code is not None:
            raise RuntimeError(f"{child.name} exited with status {code}")


def banner(port: int, logins_file: Path) -> None:
    lines = [f"GPU share governance is running at http://localhost:{port}/"]
    if logins_file.exists():
        lines.append("Demo logins:")
        lines += [f"  {line}" for line in logins_file.read_text().splitlines() if line.strip()]
    lines.append("Press Ctrl-C to stop everything.")
    width = max(len(line) for line in lines)
    print("\n" + "=" * width, *lines, "=" * width + "\n", sep="\n", flush=True)


def on_signal(signum: int, frame: FrameType | None) -> None:
    # Later signals during cleanup are ignored, so that the cleanup finishes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Shutdown(signal.Signals(signum).name)


def main() -> int:
    port_text = os.environ.get("PORT", "8000")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        say(f"PORT: expected a port number, got {port_text!r}")
        return 2
    port = int(port_text)
    var = data_dir()
    var.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    env = dict(os.environ, PYTHONUNBUFFERED="1", DATA_DIR=str(var))
    # The demo keeps working: teams submit, capacity comes and goes (docs/operations.md).
    env.setdefault("DEMO_ACTIVITY_SECONDS", "20")
    children: list[Child] = []
    manage = [sys.executable, "manage.py"]
    try:
        with services(env, var):
            try:
                say("migrating the database")
                subprocess.run([*manage, "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
                say("loading the demo data (skipped when present)")
                subprocess.run([*manage, "load_demo"], cwd=ROOT, env=env, check=True)

                concurrency = env.get("WORKER_CONCURRENCY", "2")
                children.append(
                    start("web", [*manage, "runserver", "--insecure", f"0.0.0.0:{port}"], env)
                )
                children.append(
                    start(
                        "worker",
                        ["celery", "-A", "governance", "worker", "--loglevel", "WARNING",
                         "--concurrency", concurrency],
                        env,
                    )
                )  # fmt: skip
                children.append(
                    start(
                        "beat",
                        ["celery", "-A", "governance", "beat", "--loglevel", "WARNING",
                         "--schedule", str(var / "celerybeat-schedule")],
                        env,
                    )
                )  # fmt: skip
                wait_for_port(port, children)
                banner(port, var / "demo_logins.txt")
                while True:
                    check_alive(children)
                    time.sleep(0.5)
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                if children:
                    say("stopping the web server, worker and beat")
                    stop(children)
    except Shutdown as signal_name:
        say(f"{signal_name}: stopped")
        return 0
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        say(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
