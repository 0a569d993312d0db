"""The product as an operator runs it, a client that submits steadily, and the checks.

:class:`Product` starts ``./scripts/run`` exactly as the README says, with the embedded
PostgreSQL and Redis under a temporary ``DATA_DIR`` and a port of its own, and injects
faults only into what that run started: its embedded servers (stopped through
``governance.embedded`` on its data folder) and the processes its supervisor runs (their
pids come from ``supervisorctl`` with the run's own configuration). The machine's shared
PostgreSQL and Redis are never touched.

:class:`Load` is a well-behaved client: each job is sent with an ``Idempotency-Key`` and,
whatever goes wrong (connection refused or reset, 503), sent again with the same key
until it is answered 201. It records every attempt. The checks read the product's own
database: every answered key is exactly one job, capacity was never exceeded, no job was
admitted while it was running.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg

from governance import embedded

ROOT = Path(__file__).resolve().parent.parent.parent
G5 = "ml.g5.xlarge"
CAPACITY = 8
# Work seconds of each job: 3 s of real time at the run command's DEMO_TIME_FACTOR of 60.
JOB_DURATION = 180
START_TIMEOUT_SECONDS = 420.0
STOP_TIMEOUT_SECONDS = 90.0
GIVE_UP_SECONDS = 180.0  # a client that cannot submit for this long has lost the job
END_EVENTS = {"preempted", "completed", "failed", "cancelled", "timed_out", "lost"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http_request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 15.0,
) -> Answer:
    """One request on a new connection; connection problems raise (OSError and kin)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return Answer(
            response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        )
    finally:
        conn.close()


def failure_name(exc: BaseException) -> str:
    """A short name for what a client saw when a request failed without an answer."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "connection reset"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "disconnected before answering"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timeout"
    return type(exc).__name__


class Product:
    """``./scripts/run`` in ``folder``: its own data folder, port, log and supervisor."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data_dir = folder / "data"
        self.port = free_port()
        self.log_path = folder / "run.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.token = ""

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        env = {
            name: value
            for name, value in os.environ.items()
            # The README's default: embedded servers, nothing external.
            if name not in {"DATABASE_URL", "REDIS_URL", "TEST_DATABASE_NAME", "DATA_DIR"}
        }
        env.update(
            DATA_DIR=str(self.data_dir),
            PORT=str(self.port),
            # Only this test's work in the product: the demo's own activity would add load
            # to a 2-core machine and nothing to what is measured.
            DEMO_ACTIVITY_SECONDS="0",
            WEB_ACCESS_LOG="0",
        )
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(ROOT / "scripts" / "run")],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while "Press Ctrl-C to stop everything." not in self.log():
            if self.process.poll() is not None:
                raise RuntimeError(f"./scripts/run exited early:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"./scripts/run did not start in time:\n{self.log()[-4000:]}")
            time.sleep(0.5)
        # The banner says it listens; on a busy machine the first answers may still be slow.
        while True:
            try:
                answer = self.call(
                    "POST", "/api/auth/token/", {"username": "admin", "password": "admin"}
                )
                break
            except (OSError, http.client.HTTPException):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        assert answer.status == 200, answer.body
        self.token = answer.json()["token"]

    def stop(self) -> int | None:
        """Ctrl-C, as a person stops it; returns its exit status (None if it had to be killed)."""
        status: int | None = None
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGINT)
            try:
                status = self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        elif self.process is not None:
            status = self.process.returncode
        # Whatever happened above, leave no server of this data folder running.
        embedded.stop_all(self.data_dir)
        return status

    def start_servers(self) -> str:
        """``python -m governance.embedded start`` on its data folder, as an operator would
        bring a stopped server back; returns the ``REDIS_URL`` it printed."""
        result = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "python"), "-m", "governance.embedded", "start"],
            cwd=ROOT,
            env={**os.environ, "DATA_DIR": str(self.data_dir)},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        found = re.search(r"REDIS_URL='([^']+)'", result.stdout)
        assert found, result.stdout
        return found.group(1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # --- the processes its supervisor runs -----------------------------------------------

    def supervisorctl(self, *args: str) -> str:
        config = self.data_dir / "supervisord.conf"
        result = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "supervisorctl"), "-c", str(config), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return result.stdout.strip()

    def pid(self, program: str) -> int:
        """The pid of a supervised program (web: gunicorn's master; worker: Celery's main)."""
        text = self.supervisorctl("pid", program)
        if not text.isdigit() or text == "0":
            raise RuntimeError(f"{program} has no pid: {text!r}")
        return int(text)

    def running_since(self, program: str) -> float:
        """When supervisor spawned ``program``'s current process (a unix time)."""
        name = program.rpartition(":")[2]
        spawned = re.findall(rf"(\S+ \S+) INFO spawned: '{re.escape(name)}' with pid", self.log())
        assert spawned, f"supervisor never spawned {program}"
        moment = time.strptime(spawned[-1].split(",")[0], "%Y-%m-%d %H:%M:%S")
        return time.mktime(moment) + int(spawned[-1].split(",")[1]) / 1000

    def wait_running(self, program: str, other_than: int | None, timeout: float = 60.0) -> int:
        """Wait until ``program`` runs with a pid other than ``other_than``; return it."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.supervisorctl("status", program)
            with contextlib.suppress(RuntimeError):
                pid = self.pid(program)
                if "RUNNING" in status and pid != other_than:
                    return pid
            if time.monotonic() > deadline:
                raise AssertionError(f"{program} not running again within {timeout} s: {status}")
            time.sleep(0.2)

    # --- its API and database ------------------------------------------------------------

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Answer:
        sent = {"Content-Type": "application/json", **(headers or {})}
        if self.token:
            sent.setdefault("Authorization", f"Token {self.token}")
        data = json.dumps(body).encode() if body is not None else None
        return http_request(self.port, method, path, data, sent)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = self.call("POST", path, body)
        assert answer.status == 201, (path, answer.status, answer.body)
        result: dict[str, Any] = answer.json()
        return result

    def database_url(self) -> str:
        url = embedded.running_postgres_url(self.data_dir)
        if url is None:
            raise RuntimeError("the embedded PostgreSQL is not running")
        return url

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` on the product's database, retried while it restarts."""
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(self.database_url(), connect_timeout=5) as conn:
                    return list(conn.execute(sql, params).fetchall())  # type: ignore[arg-type]
            except (psycopg.OperationalError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def sign_in_to_the_web(self, username: str, password: str) -> str:
        """A session cookie for the pages, through the sign-in form as a browser gets one."""
        page = http_request(self.port, "GET", "/login/")
        csrf_cookie = re.search(r"csrftoken=([^;]+)", page.headers.get("set-cookie", ""))
        csrf_field = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
        assert csrf_cookie and csrf_field, page.body[:500]
        form = {
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": csrf_field.group(1).decode(),
        }
        answer = http_request(
            self.port,
            "POST",
            "/login/",
            urlencode(form).encode(),
            {
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": f"csrftoken={csrf_cookie.group(1)}",
                "Referer": f"http://127.0.0.1:{self.port}/login/",
            },
        )
        session = re.search(r"sessionid=([^;]+)", answer.headers.get("set-cookie", ""))
        assert answer.status == 302 and session, (answer.status, answer.body[:500])
        return f"sessionid={session.group(1)}"


@dataclass
class FaultQueue:
    """A queue of capacity 8 where one share borrows and the other reclaims."""

    queue: int
    borrower: int  # LEND_AND_BORROW, limit 2, unlimited borrowing
    owner: int  # LEND, limit 6: lends its idle capacity, takes it back when it needs it


def create_fault_queue(product: Product, name: str) -> FaultQueue:
    queue = product.create(
        "/api/queues/", {"name": name, "executor": "simulated", "capacity": {G5: CAPACITY}}
    )
    borrowers = product.create("/api/teams/", {"name": f"{name}-borrowers", "leads": ["admin"]})
    owners = product.create("/api/teams/", {"name": f"{name}-owners", "leads": ["admin"]})
    borrower = product.create(
        "/api/shares/",
        {
            "queue": queue["id"],
            "team": borrowers["id"],
            "name": f"{name}-borrower",
            "policy": "LEND_AND_BORROW",
            "borrow_limit": -1,
            "limits": {G5: 2},
        },
    )
    owner = product.create(
        "/api/shares/",
        {
            "queue": queue["id"],
            "team": owners["id"],
            "name": f"{name}-owner",
            "policy": "LEND",
            "limits": {G5: CAPACITY - 2},
        },
    )
    return FaultQueue(queue=queue["id"], borrower=borrower["id"], owner=owner["id"])


@dataclass
class Attempt:
    at: float
    key: str
    outcome: str  # "201", "201 replayed", "503", "connection refused", ...
    content_type: str = ""


@dataclass
class Submission:
    key: str
    share: int
    first_try: float
    answered_at: float | None = None
    job: int | None = None
    replayed: bool = False
    attempts: int = 0


class Load:
    """Steady submissions, one client thread per share, each retrying with its key."""

    def __init__(self, product: Product, fault_queue: FaultQueue, interval: float = 1.0) -> None:
        self.product = product
        self.fault_queue = fault_queue
        self.interval = interval
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.attempts: list[Attempt] = []
        self.submissions: list[Submission] = []
        self.threads = [
            threading.Thread(target=self._client, args=(label, share), daemon=True)
            for label, share in (("b", fault_queue.borrower), ("o", fault_queue.owner))
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=GIVE_UP_SECONDS + 30)

    def _client(self, label: str, share: int) -> None:
        number = 0
        while not self.stop_event.is_set():
            started = time.monotonic()
            self._submit(f"{label}-{number:05d}", share)
            number += 1
            self.stop_event.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def _submit(self, key: str, share: int) -> None:
        submission = Submission(key=key, share=share, first_try=time.time())
        with self.lock:
            self.submissions.append(submission)
        body = {
            "queue": self.fault_queue.queue,
            "share": share,
            "name": key,
            "preferences": [{"instance_type": G5, "count": 1}],
            "duration": JOB_DURATION,
        }
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while time.monotonic() < deadline:
            submission.attempts += 1
            try:
                answer = self.product.call(
                    "POST", "/api/jobs/", body, {"Idempotency-Key": f"faults-{key}"}
                )
            except (OSError, http.client.HTTPException) as exc:
                self._record(key, failure_name(exc))
                time.sleep(0.5)
                continue
            replayed = answer.headers.get("idempotent-replayed") == "true"
            outcome = f"{answer.status}{' replayed' if replayed else ''}"
            self._record(key, outcome, answer.headers.get("content-type", ""))
            if answer.status == 201:
                submission.answered_at = time.time()
                submission.job = int(answer.json()["id"])
                submission.replayed = replayed
                return
            if answer.status < 500:
                return  # a client error: retrying would not help; the checks report it
            retry_after = float(answer.headers.get("retry-after", "1") or 1)
            time.sleep(min(retry_after, 1.0))

    def _record(self, key: str, outcome: str, content_type: str = "") -> None:
        with self.lock:
            self.attempts.append(Attempt(time.time(), key, outcome, content_type))

    def errors_between(self, start: float, end: float) -> list[Attempt]:
        with self.lock:
            return [a for a in self.attempts if start <= a.at < end and a.outcome != "201"]

    def answered(self) -> list[Submission]:
        with self.lock:
            return [s for s in self.submissions if s.job is not None]


# --- what the database says ------------------------------------------------------------


@dataclass
class Ledger:
    """The fault queue's jobs and events, replayed to check the invariants."""

    jobs_by_name: dict[str, list[int]]
    admissions: list[tuple[int, float]]  # (event id, at as a unix time)
    max_usage: int = 0
    double_admissions: list[int] = field(default_factory=list)
    states: dict[str, int] = field(default_factory=dict)


def read_ledger(product: Product, queue: int) -> Ledger:
    jobs: dict[str, list[int]] = {}
    for name, job_id in product.query(
        "SELECT name, id FROM governance_job WHERE queue_id = %s ORDER BY id", (queue,)
    ):
        jobs.setdefault(name, []).append(job_id)
    events = product.query(
        "SELECT e.id, e.job_id, extract(epoch FROM e.at)::float8, e.type, e.data "
        "FROM governance_jobevent e JOIN governance_job j ON j.id = e.job_id "
        "WHERE j.queue_id = %s ORDER BY e.id",
        (queue,),
    )
    ledger = Ledger(jobs_by_name=jobs, admissions=[])
    running: dict[int, int] = {}
    usage = 0
    # Cycles of one queue run one at a time under its row lock, so event ids are the
    # order in which the decisions were applied.
    for event_id, job_id, at, event_type, data in events:
        if event_type == "admitted":
            if job_id in running:
                ledger.double_admissions.append(job_id)
            count = int(data.get("count") or 1)
            running[job_id] = count
            usage += count
            ledger.max_usage = max(ledger.max_usage, usage)
            ledger.admissions.append((event_id, at))
        elif event_type in END_EVENTS and job_id in running:
            usage -= running.pop(job_id)
    ledger.states = {
        state: count
        for state, count in product.query(
            "SELECT state, count(*) FROM governance_job WHERE queue_id = %s GROUP BY state",
            (queue,),
        )
    }
    return ledger


def first_admission_after(product: Product, queue: int, moment: float, timeout: float) -> float:
    """The time of the first admission in ``queue`` at or after ``moment`` (a unix time)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = product.query(
            "SELECT min(extract(epoch FROM e.at)::float8) FROM governance_jobevent e "
            "JOIN governance_job j ON j.id = e.job_id "
            "WHERE j.queue_id = %s AND e.type = 'admitted' AND e.at >= to_timestamp(%s)",
            (queue, moment),
        )
        if rows and rows[0][0] is not None:
            return float(rows[0][0])
        if time.monotonic() > deadline:
            raise AssertionError(f"no admission within {timeout} s after the fault ended")
        time.sleep(0.2)
