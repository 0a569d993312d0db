"""Live scheduling end to end: API -> Redis trigger -> real Celery worker -> executors.

Nothing here calls the scheduler directly except ``declare_lost_runs`` (beat's job,
which does not run in tests): every admission and preemption is made by the worker
subprocess after the API's change asked for a cycle.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth.models import Group
from knox.models import AuthToken
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, Job, JobState
from governance.models.capacity import Executor
from governance.roles import AGENT_GROUP
from scheduler import tasks
from tests.factories import TeamFactory, UserFactory, make_lead, make_queue, make_share
from tests.live.conftest import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

G5 = "ml.g5.xlarge"


@pytest.fixture
def world(celery_worker_process: Any) -> Any:
    from types import SimpleNamespace

    queue = make_queue("live", {G5: 1})
    team = TeamFactory(name="live-team")
    share = make_share(queue, team, "live-share", {G5: 1}, in_share_preemption=True)
    lead = make_lead(team, "live_lead")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=lead)[1]}")
    return SimpleNamespace(queue=queue, share=share, lead=lead, client=client)


def submit(world: Any, name: str, **fields: Any) -> int:
    body = {
        "queue": world.queue.pk,
        "share": world.share.pk,
        "name": name,
        "preferences": [{"instance_type": G5, "count": 1}],
        **fields,
    }
    response = world.client.post("/api/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    return int(response.json()["id"])


def state(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


def test_api_job_is_admitted_runs_on_the_simulated_fleet_and_completes(world: Any) -> None:
    first = submit(world, "first", duration=100)  # 1 real second at 100x
    second = submit(world, "second", duration=50)
    wait_for(lambda: state(first) == JobState.RUNNING, timeout=15)
    assert state(second) == JobState.PENDING
    # Nobody asks for the next cycle: the worker's own timer completes the first job at
    # its simulated finish and admits the second.
    wait_for(lambda: state(first) == JobState.SUCCEEDED and state(second) == JobState.RUNNING)
    wait_for(lambda: state(second) == JobState.SUCCEEDED)
    detail = world.client.get(f"/api/jobs/{first}/").json()
    assert [e["type"] for e in detail["events"]] == ["submitted", "admitted", "completed"]
    assert AuditEntry.objects.filter(event_type=AuditEvent.JOB_ADMITTED, job_id=first).count() == 1


def worker_sessions() -> set[tuple[int, object]]:
    """The other client sessions on the test database: the worker's, as it keeps them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return set(cursor.fetchall())


def test_the_worker_keeps_its_database_connection_from_task_to_task(world: Any) -> None:
    """Celery closes a task's database connections after it unless told otherwise: each
    cycle would pay for a new PostgreSQL session. The worker keeps one, as the web does."""
    first = submit(world, "first", duration=100)
    wait_for(lambda: state(first) == JobState.RUNNING, timeout=15)
    kept = wait_for(worker_sessions)
    second = submit(world, "second", duration=50)
    # the second waits for the first to complete (its timer's cycle), then is admitted:
    # two more cycles at least, each a task of its own
    wait_for(lambda: state(second) == JobState.RUNNING)
    assert worker_sessions() == kept


@pytest.fixture
def agent_world(world: Any) -> Any:
    world.queue.executor = Executor.AGENT
    world.queue.save()
    agent_user = UserFactory(username="agent-bot")
    agent_user.groups.add(Group.objects.get_or_create(name=AGENT_GROUP)[0])
    agent = APIClient()
    token = agent.post("/api/auth/token/", {"username": "agent-bot", "password": "pw"}).json()
    agent.credentials(HTTP_AUTHORIZATION=f"Token {token['token']}")
    world.agent = agent
    world.claim_path = f"/api/agents/queues/{world.queue.pk}/claim/"
    return world


def claim(world: Any, name: str = "a1") -> list[dict[str, Any]]:
    response = world.agent.post(world.claim_path, {"agent": name, "limit": 4}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_agent_claims_runs_and_acknowledges_a_preemption(agent_world: Any) -> None:
    w = agent_world
    low = submit(w, "low", priority=1, duration=600, checkpoint_interval=60)
    [run] = wait_for(lambda: claim(w))
    assert (run["job"], run["run"], run["resume_from"]) == (low, 1, 0)
    report = f"/api/agents/jobs/{low}/report/"
    assert w.agent.post(report, {"run": 1, "kind": "started"}, format="json").status_code == 200
    checkpoint = {"run": 1, "kind": "checkpoint", "progress": 60}
    assert w.agent.post(report, checkpoint, format="json").status_code == 200

    high = submit(w, "high", priority=5, duration=600)
    stops_path = f"/api/agents/queues/{w.queue.pk}/stops/?agent=a1"
    orders = wait_for(lambda: w.agent.get(stops_path).json())
    assert orders == [{"job": low, "run": 1}]
    assert state(low) == JobState.PENDING
    # The preempted run is over: its reports are refused, it cannot complete.
    beat = w.agent.post(report, {"run": 1, "kind": "heartbeat"}, format="json")
    assert beat.status_code == 409
    done = w.agent.post(f"/api/agents/jobs/{low}/complete/", {"run": 1}, format="json")
    assert done.status_code == 409
    ack = w.agent.post(f"/api/agents/jobs/{low}/stopped/", {"run": 1}, format="json")
    assert ack.status_code == 200
    assert w.agent.get(stops_path).json() == []
    again = w.agent.post(f"/api/agents/jobs/{low}/stopped/", {"run": 1}, format="json")
    assert again.status_code == 409

    [run] = wait_for(lambda: claim(w))
    assert run["job"] == high
    preempted = AuditEntry.objects.get(event_type=AuditEvent.JOB_PREEMPTED, job_id=low)
    assert preempted.after["rule"] == "priority" and preempted.after["by_job"] == high
    job = Job.objects.get(pk=low)
    assert (job.checkpoint_work, job.preemptions) == (60, 1)

    # The high job completes; the low one is admitted again and resumes at its checkpoint.
    finished = w.agent.post(f"/api/agents/jobs/{high}/complete/", {"run": 1}, format="json")
    assert finished.status_code == 200 and finished.json()["state"] == JobState.SUCCEEDED
    [run] = wait_for(lambda: claim(w))
    assert (run["job"], run["run"], run["resume_from"]) == (low, 2, 60)


def test_a_silent_agents_run_is_declared_lost_and_requeued(agent_world: Any, settings: Any) -> None:
    w = agent_world
    settings.AGENT_HEARTBEAT_SECONDS = 0.2
    job_id = submit(w, "orphan", duration=600)
    [run] = wait_for(lambda: claim(w, "flaky"))
    assert run["job"] == job_id
    report = f"/api/agents/jobs/{job_id}/report/"
    assert w.agent.post(report, {"run": 1, "kind": "started"}, format="json").status_code == 200
    assert tasks.declare_lost_runs() == 0  # heard from within 1.5 intervals
    time.sleep(0.35)  # the agent goes silent for more than 1.5 x 0.2 s
    # Beat would call this every SCHEDULER_SAFETY_NET_SECONDS; it does not run in tests.
    assert tasks.declare_lost_runs() == 1
    lost = AuditEntry.objects.get(event_type=AuditEvent.JOB_LOST, job_id=job_id)
    assert lost.after["rule"] == "heartbeat_lost"
    # The requeue asked the worker for a cycle: a new run, claimable by a live agent.
    [run] = wait_for(lambda: claim(w, "healthy"))
    assert (run["job"], run["run"]) == (job_id, 2)
    job = Job.objects.get(pk=job_id)
    assert (job.agent, job.counted_preemptions) == ("healthy", 0)
    # The silent agent comes back: its run is over.
    late = w.agent.post(report, {"run": 1, "kind": "heartbeat"}, format="json")
    assert late.status_code == 409
