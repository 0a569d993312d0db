"""Fault injection against the product started by ``./scripts/run`` (issue 15).

One run of the README's command (embedded PostgreSQL and Redis under a temporary data
folder, its own port) takes steady submissions to a queue of capacity 8 where one share
borrows and the other reclaims, while the tests, in order:

1. send 50 requests at once (none may be reset: gunicorn, not the development server);
2. restart PostgreSQL (down 5 s): the API answers JSON 503 with Retry-After, the pages a
   plain 503 page; nothing restarts; the scheduler resumes by itself;
3. stop Redis for 20 s: the API keeps accepting work (201), the worker and beat survive
   and reconnect, Redis comes back at the same address;
4. kill -9 one of the two workers, 5. beat, 6. the web server: supervisor restarts
   each (and only it);

and after each fault wait for admissions to resume (at most 10 s after the fault ended).
The last test stops the load, lets the queue drain and checks the whole history: every
answered submission is exactly one job (none lost, none duplicated, although clients
retried through every fault), capacity was never exceeded, no job was admitted twice.
It prints the figures per fault (and writes them to ``fault-report.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from governance import embedded
from tests.faults.conftest import REPORT
from tests.faults.harness import (
    CAPACITY,
    FaultQueue,
    Load,
    Product,
    create_fault_queue,
    first_admission_after,
    http_request,
    read_ledger,
)

pytestmark = pytest.mark.faults

RESUME_WITHIN_SECONDS = 10.0
POSTGRES_DOWN_SECONDS = 5.0
REDIS_DOWN_SECONDS = 20.0
SETTLE_SECONDS = 4.0
PARALLEL_REQUESTS = 50


@dataclass
class FaultResult:
    fault: str
    started: float
    ended: float
    resumed_after_seconds: float
    client_errors: dict[str, int]
    window_end: float = 0.0
    restarted_after_seconds: float | None = None  # a killed program spawned again
    lost: int = -1
    duplicated: int = -1
    replayed: int = 0


@dataclass
class Campaign:
    product: Product
    fault_queue: FaultQueue
    load: Load
    results: list[FaultResult]
    session_cookie: str


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    # Not under pytest's own temporary folder: that one is private to this user (0700),
    # and as root the embedded PostgreSQL runs as another user that must reach its data.
    folder = Path(tempfile.mkdtemp(prefix="governance-faults-"))
    folder.chmod(0o755)
    product = Product(folder)
    load: Load | None = None
    passed = False
    try:
        product.start()
        fault_queue = create_fault_queue(product, "faults")
        session_cookie = product.sign_in_to_the_web("admin", "admin")
        load = Load(product, fault_queue)
        load.start()
        yield Campaign(product, fault_queue, load, [], session_cookie)
        passed = True
    finally:
        if load is not None:
            load.stop_event.set()
        status = product.stop()
        # Ctrl-C stops everything and the command exits 0.
        assert status == 0, f"./scripts/run exited with {status}:\n{product.log()[-3000:]}"
        # The run's log stays with pytest's temporary files; the data folder goes.
        shutil.copy(product.log_path, tmp_path_factory.mktemp("faults") / "run.log")
        report_file = folder / "fault-report.json"
        if report_file.exists():
            shutil.copy(report_file, tmp_path_factory.getbasetemp() / "fault-report.json")
        if passed:
            shutil.rmtree(folder, ignore_errors=True)


def run_fault(campaign: Campaign, name: str, inject: Callable[[], None]) -> FaultResult:
    """Inject a fault, wait for admissions to resume, and record what clients saw."""
    product, load = campaign.product, campaign.load
    started = time.time()
    inject()
    ended = time.time()
    resumed_at = first_admission_after(
        product, campaign.fault_queue.queue, ended, timeout=RESUME_WITHIN_SECONDS * 6
    )
    time.sleep(SETTLE_SECONDS)  # clients retrying through the fault finish meanwhile
    window_end = time.time()
    errors = Counter(a.outcome for a in load.errors_between(started, window_end))
    result = FaultResult(
        fault=name,
        started=started,
        ended=ended,
        resumed_after_seconds=round(max(0.0, resumed_at - ended), 2),
        client_errors=dict(errors),
        window_end=window_end,
    )
    campaign.results.append(result)
    assert result.resumed_after_seconds <= RESUME_WITHIN_SECONDS, result
    # Errors are retried; but a 500 (a traceback) is never the answer.
    assert not [outcome for outcome in errors if outcome.startswith("500")], result
    return result


# Supervisor's names: the run command starts two workers (WORKERS=2).
PROGRAMS = ("web", "worker:worker-0", "worker:worker-1", "beat")


def pids(product: Product) -> dict[str, int]:
    return {name: product.pid(name) for name in PROGRAMS}


def test_steady_load_is_admitted(campaign: Campaign) -> None:
    product, load = campaign.product, campaign.load
    time.sleep(6)
    assert len(load.answered()) >= 6, product.log()[-3000:]
    first_admission_after(product, campaign.fault_queue.queue, time.time() - 6, timeout=20)
    assert load.errors_between(0, time.time()) == []


def test_fifty_parallel_requests_are_all_answered(campaign: Campaign) -> None:
    """Issue 10: the run command serves 50 parallel requests without a reset."""
    product = campaign.product
    barrier = threading.Barrier(PARALLEL_REQUESTS)
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        # Half the API (a database read with token auth), half a page with static files.
        path = "/api/queues/" if index % 2 else "/static/css/app.css"
        headers = {"Authorization": f"Token {product.token}"}
        barrier.wait()
        try:
            outcome = str(http_request(product.port, "GET", path, headers=headers).status)
        except OSError as exc:
            outcome = type(exc).__name__
        with lock:
            outcomes.append(outcome)

    for _round in range(3):
        outcomes.clear()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(PARALLEL_REQUESTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert Counter(outcomes) == {"200": PARALLEL_REQUESTS}


def test_postgres_restart(campaign: Campaign) -> None:
    product = campaign.product
    before = pids(product)
    seen: dict[str, Any] = {}

    def restart() -> None:
        assert embedded.stop_postgres(product.data_dir)
        time.sleep(1)
        api = product.call("GET", "/api/jobs/?limit=1")
        page = http_request(product.port, "GET", "/", headers={"Cookie": campaign.session_cookie})
        seen.update(api=api, page=page)
        time.sleep(POSTGRES_DOWN_SECONDS - 1)
        product.start_servers()

    run_fault(campaign, "PostgreSQL restart (down 5 s)", restart)
    api, page = seen["api"], seen["page"]
    assert api.status == 503 and api.headers["content-type"] == "application/json"
    assert api.headers["retry-after"].isdigit() and "database" in api.json()["detail"][0]
    assert page.status == 503 and page.headers["content-type"].startswith("text/html")
    assert page.headers["retry-after"].isdigit() and b"Traceback" not in page.body
    assert b"Temporarily unavailable" in page.body
    # During the outage clients got JSON 503s or nothing, never an HTML error.
    for attempt in campaign.load.errors_between(campaign.results[-1].started, time.time()):
        if attempt.outcome == "503":
            assert attempt.content_type == "application/json", attempt
    # Nobody restarted anything: the same processes reconnected by themselves.
    assert pids(product) == before


def test_redis_stopped_for_20_seconds(campaign: Campaign) -> None:
    product = campaign.product
    before = pids(product)
    url = embedded.running_redis_url(product.data_dir)
    accepted_while_down: list[int] = []

    def outage() -> None:
        assert embedded.stop_redis(product.data_dir)
        down_at = time.time()
        time.sleep(REDIS_DOWN_SECONDS)
        accepted_while_down.extend(
            s.job for s in campaign.load.answered() if s.answered_at and s.answered_at > down_at
        )
        # Back at the same address: processes that kept the URL find it again.
        assert product.start_servers() == url

    result = run_fault(campaign, "Redis stopped 20 s", outage)
    # The API kept accepting work while Redis was down: no client error at all.
    assert len(accepted_while_down) >= REDIS_DOWN_SECONDS  # two clients, one job/s each
    assert result.client_errors == {}, result
    # The worker and beat survived the outage: no process was restarted.
    assert pids(product) == before, product.log()[-5000:]


def kill_program(campaign: Campaign, program: str, label: str) -> None:
    """kill -9 of a supervised program's main process (gunicorn's master, Celery's main)."""
    product = campaign.product
    old = product.pid(program)
    others = {name: pid for name, pid in pids(product).items() if name != program}
    killed_at = 0.0

    def kill() -> None:
        nonlocal killed_at
        os.kill(old, signal.SIGKILL)
        killed_at = time.time()

    result = run_fault(campaign, f"kill -9 of {label}", kill)
    product.wait_running(program, other_than=old)
    result.restarted_after_seconds = round(product.running_since(program) - killed_at, 2)
    # Supervisor saw it, said so, and restarted only that program.
    process_name = program.rpartition(":")[2]
    assert f"exited: {process_name} (terminated by SIGKILL; not expected)" in product.log()
    assert {name: pid for name, pid in pids(product).items() if name != program} == others


def test_kill_worker(campaign: Campaign) -> None:
    kill_program(campaign, "worker:worker-0", "a worker")


def test_kill_beat(campaign: Campaign) -> None:
    kill_program(campaign, "beat", "beat")


def test_kill_web(campaign: Campaign) -> None:
    kill_program(campaign, "web", "the web server")


def test_nothing_lost_or_duplicated(campaign: Campaign) -> None:
    product, load, queue = campaign.product, campaign.load, campaign.fault_queue.queue
    load.stop()
    submissions = list(load.submissions)
    # Every submission was answered 201 in the end: the clients' retries got through.
    unanswered = [s.key for s in submissions if s.job is None]
    # The queue drains: every job ends (they run 3 s each).
    deadline = time.monotonic() + 120
    while True:
        ledger = read_ledger(product, queue)
        if not ledger.states.get("PENDING") and not ledger.states.get("RUNNING"):
            break
        assert time.monotonic() < deadline, f"the queue did not drain: {ledger.states}"
        time.sleep(1)

    duplicated = {name for name, ids in ledger.jobs_by_name.items() if len(ids) > 1}
    lost = {s.key for s in submissions if s.job is not None and s.key not in ledger.jobs_by_name}
    wrong_id = {
        s.key
        for s in submissions
        if s.job is not None and ledger.jobs_by_name.get(s.key) != [s.job]
    }
    unknown = set(ledger.jobs_by_name) - {s.key for s in submissions}

    for result in campaign.results:
        window = [s for s in submissions if result.started <= s.first_try < result.window_end]
        result.lost = sum(1 for s in window if s.job is None or s.key not in ledger.jobs_by_name)
        result.duplicated = sum(1 for s in window if s.key in duplicated)
        result.replayed = sum(1 for s in window if s.replayed)
    report(campaign, ledger.max_usage, len(submissions), ledger.states)

    assert unanswered == []
    assert lost == set() and duplicated == set() and wrong_id == set() and unknown == set()
    assert ledger.double_admissions == []
    assert 0 < ledger.max_usage <= CAPACITY
    assert set(ledger.states) == {"SUCCEEDED"}, ledger.states
    assert [r.fault for r in campaign.results] == [
        "PostgreSQL restart (down 5 s)",
        "Redis stopped 20 s",
        "kill -9 of a worker",
        "kill -9 of beat",
        "kill -9 of the web server",
    ]


def report(
    campaign: Campaign,
    max_usage: int,
    submitted: int,
    states: dict[str, int],
) -> None:
    lines = [
        f"{submitted} jobs submitted through the faults, final states {states}, "
        f"peak usage {max_usage} of capacity {CAPACITY}",
        f"{'fault':<30} {'admissions resumed':>18} {'restarted':>9}  {'lost':>4} {'dup':>4} "
        f"{'replayed':>8}  client errors (each retried)",
    ]
    for r in campaign.results:
        errors = ", ".join(f"{n} x {k}" for k, n in sorted(r.client_errors.items())) or "none"
        restarted = f"{r.restarted_after_seconds:.1f} s" if r.restarted_after_seconds else "-"
        lines.append(
            f"{r.fault:<30} {r.resumed_after_seconds:>14.2f} s {restarted:>9}  {r.lost:>4} "
            f"{r.duplicated:>4} {r.replayed:>8}  {errors}"
        )
    REPORT.extend(lines)
    path = Path(campaign.product.folder) / "fault-report.json"
    path.write_text(json.dumps([asdict(r) for r in campaign.results], indent=2))
