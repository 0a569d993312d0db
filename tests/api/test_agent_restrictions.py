"""docs/agents.md for agents: credentials act only on runs of queues run by agents, and
on a run only as the agent that claimed it; unknown jobs are 404s; a run that is over is
one 409 shape everywhere."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import Job, JobState
from governance.models.capacity import Executor
from governance.roles import AGENT_GROUP
from governance.services import runs
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, UserFactory, make_job, make_queue, make_share

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
ENDPOINTS = ["report", "complete", "fail", "stopped"]


def agent_client(username: str) -> APIClient:
    user = UserFactory(username=username)
    user.groups.add(Group.objects.get_or_create(name=AGENT_GROUP)[0])
    client = APIClient()
    client.force_authenticate(user)
    client.user = user  # type: ignore[attr-defined]
    return client


@pytest.fixture
def w() -> Any:
    """An agent queue with two admitted jobs, a simulated queue with one running job."""
    agents_q = make_queue("agents", {G5: 2})
    agents_q.executor = Executor.AGENT
    agents_q.save()
    team = TeamFactory(name="t")
    share = make_share(agents_q, team, "s", {G5: 2})
    submitter = UserFactory(username="submitter")
    jobs = [make_job(share, submitter, name=f"j{i}", duration=60) for i in range(2)]
    run_cycle(agents_q.pk)
    fleet_q = make_queue("fleet", {G5: 1})
    fleet_share = make_share(fleet_q, team, "f", {G5: 1})
    fleet_job = make_job(fleet_share, submitter, name="fleet-job", duration=60)
    run_cycle(fleet_q.pk)
    fleet_job.refresh_from_db()
    assert fleet_job.state == JobState.RUNNING
    return SimpleNamespace(
        queue=agents_q,
        jobs=jobs,
        fleet_job=fleet_job,
        a=agent_client("agent-a"),
        b=agent_client("agent-b"),
    )


def body_for(endpoint: str, run: int, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"run": run, **extra}
    if endpoint == "report":
        body["kind"] = "heartbeat"
    return body


def claim(client: APIClient, queue_id: int, name: str, limit: int = 1) -> list[dict[str, Any]]:
    response = client.post(
        f"/api/agents/queues/{queue_id}/claim/", {"agent": name, "limit": limit}, format="json"
    )
    assert response.status_code == 200, response.content
    return list(response.json())


def snapshot(job: Job) -> tuple[Any, ...]:
    job.refresh_from_db()
    return (job.state, job.run, job.agent, job.last_heartbeat_at, job.stop_requested_run)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_unknown_job_is_a_json_404(w: Any, endpoint: str) -> None:
    for job_id in (999_999, 2**63 + 5):
        response = w.a.post(
            f"/api/agents/jobs/{job_id}/{endpoint}/", body_for(endpoint, 1), format="json"
        )
        assert response.status_code == 404, response.content
        assert "detail" in response.json()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_no_agent_acts_on_a_queue_it_does_not_run(w: Any, endpoint: str) -> None:
    """The simulated fleet's job cannot be touched with agent credentials, claimed or not."""
    job = w.fleet_job
    before = snapshot(job)
    response = w.a.post(
        f"/api/agents/jobs/{job.pk}/{endpoint}/", body_for(endpoint, job.run), format="json"
    )
    assert response.status_code == 403, response.content
    assert "agents act only on queues run by agents" in response.json()["detail"][0]
    assert snapshot(job) == before


def test_claiming_a_fleet_queue_is_refused(w: Any) -> None:
    response = w.a.post(
        f"/api/agents/queues/{w.fleet_job.queue_id}/claim/", {"agent": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "queue" in response.json()


@pytest.mark.parametrize("endpoint", ["report", "complete", "fail"])
def test_an_unclaimed_run_is_nobodys(w: Any, endpoint: str) -> None:
    job = w.jobs[0]
    before = snapshot(job)
    response = w.a.post(
        f"/api/agents/jobs/{job.pk}/{endpoint}/", body_for(endpoint, 1), format="json"
    )
    assert response.status_code == 403, response.content
    assert "claim it first" in response.json()["detail"][0]
    assert snapshot(job) == before


@pytest.mark.parametrize("endpoint", ["report", "complete", "fail"])
def test_another_credential_cannot_act_on_a_claimed_run(w: Any, endpoint: str) -> None:
    [run] = claim(w.a, w.queue.pk, "rack-a")
    job = Job.objects.get(pk=run["job"])
    before = snapshot(job)
    for name in ("rack-a", "rack-b", ""):
        response = w.b.post(
            f"/api/agents/jobs/{job.pk}/{endpoint}/",
            body_for(endpoint, 1, **({"agent": name} if name else {})),
            format="json",
        )
        assert response.status_code == 403, response.content
        assert "not by you" in response.json()["detail"][0]
    assert snapshot(job) == before


@pytest.mark.parametrize("endpoint", ["report", "complete", "fail"])
def test_the_same_credential_under_another_agent_name_is_refused(w: Any, endpoint: str) -> None:
    [run] = claim(w.a, w.queue.pk, "rack-a")
    response = w.a.post(
        f"/api/agents/jobs/{run['job']}/{endpoint}/",
        body_for(endpoint, 1, agent="rack-z"),
        format="json",
    )
    assert response.status_code == 403
    # Its own name (or none) works.
    response = w.a.post(
        f"/api/agents/jobs/{run['job']}/{endpoint}/",
        body_for(endpoint, 1, agent="rack-a"),
        format="json",
    )
    assert response.status_code == 200, response.content


def test_the_claimant_acts(w: Any) -> None:
    [run] = claim(w.a, w.queue.pk, "rack-a")
    url = f"/api/agents/jobs/{run['job']}"
    assert w.a.post(f"{url}/report/", body_for("report", 1), format="json").status_code == 200
    response = w.a.post(f"{url}/complete/", {"run": 1}, format="json")
    assert response.json()["state"] == JobState.SUCCEEDED


def assert_run_conflict(response: Any, job: Job) -> None:
    """The one 409 shape: ``run`` says why, ``current`` where the job is."""
    assert response.status_code == 409, response.content
    body = response.json()
    assert set(body) == {"run", "current"}
    job.refresh_from_db()
    assert body["current"] == {"job": job.pk, "run": job.run, "state": job.state, "stop": True}


@pytest.mark.parametrize("endpoint", ["report", "complete", "fail"])
def test_a_run_that_is_over_is_one_409_shape(w: Any, endpoint: str) -> None:
    [run] = claim(w.a, w.queue.pk, "rack-a")
    job = Job.objects.get(pk=run["job"])
    url = f"/api/agents/jobs/{job.pk}/{endpoint}/"
    # A run number that is not the current one...
    assert_run_conflict(w.a.post(url, body_for(endpoint, 2), format="json"), job)
    # ...and the current run once it ended: the same body.
    w.a.post(f"/api/agents/jobs/{job.pk}/complete/", {"run": 1}, format="json")
    assert_run_conflict(w.a.post(url, body_for(endpoint, 1), format="json"), job)
    # Another credential learns no more than the run is over either.
    assert_run_conflict(w.b.post(url, body_for(endpoint, 1), format="json"), job)


def preempt(job: Job) -> None:
    job.refresh_from_db()
    runs.run_preempt(
        job=Job.objects.select_related("share__team").get(pk=job.pk),
        reason="priority",
        by_job=None,
        lost_work=0.0,
        saved_work=0.0,
        fail=False,
        counts_against_retries=False,
        share_versions={},
        now=timezone.now(),
        explanation="test",
    )


def test_stop_orders_belong_to_the_claiming_credential(w: Any) -> None:
    runs_a = claim(w.a, w.queue.pk, "rack-a")
    runs_b = claim(w.b, w.queue.pk, "rack-b")
    job_a = Job.objects.get(pk=runs_a[0]["job"])
    job_b = Job.objects.get(pk=runs_b[0]["job"])
    preempt(job_a)
    preempt(job_b)
    listed = w.a.get(f"/api/agents/queues/{w.queue.pk}/stops/").json()
    assert [order["job"] for order in listed] == [job_a.pk]
    # B cannot acknowledge A's order; A can, once; then it is one 409 shape.
    url = f"/api/agents/jobs/{job_a.pk}/stopped/"
    assert w.b.post(url, {"run": 1}, format="json").status_code == 403
    assert Job.objects.get(pk=job_a.pk).stop_requested_run == 1
    assert w.a.post(url, {"run": 1}, format="json").status_code == 200
    assert_run_conflict(w.a.post(url, {"run": 1}, format="json"), job_a)
