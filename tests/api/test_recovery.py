"""Recovery verification through the API (docs/workloads.md): the agent protocol's
``complete`` report carries ``output_valid``; a lead judges a resumed run's output with
``POST /api/jobs/{id}/output/``."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import JobState, RecoveryStatus, Workload
from governance.models.capacity import Executor
from governance.roles import AGENT_GROUP
from scheduler.cycle.run import run_cycle
from tests.factories import (
    TeamFactory,
    UserFactory,
    make_job,
    make_lead,
    make_member,
    make_queue,
    make_share,
)

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_an_agents_valid_completion_of_a_resumed_run_verifies_the_workload() -> None:
    queue = make_queue("agents", {G5: 1})
    queue.executor = Executor.AGENT
    queue.save()
    team = TeamFactory(name="t")
    share = make_share(queue, team, "s", {G5: 1})
    workload = Workload.objects.create(team=team, name="vision/x")
    # A job back in the queue after one preemption: the run it is admitted for resumes.
    job = make_job(share, UserFactory(username="u"), duration=60, preemptions=1, workload=workload)
    run_cycle(queue.pk)
    agent = UserFactory(username="agent-bot")
    agent.groups.add(Group.objects.get_or_create(name=AGENT_GROUP)[0])
    client = client_for(agent)
    [run] = client.post(
        f"/api/agents/queues/{queue.pk}/claim/", {"agent": "a1", "start": True}, format="json"
    ).json()
    assert run["job"] == job.pk
    bad = client.post(
        f"/api/agents/jobs/{job.pk}/complete/",
        {"run": run["run"], "agent": "a1", "output_valid": "perhaps"},
        format="json",
    )
    assert bad.status_code == 400
    assert "output_valid" in bad.json()
    done = client.post(
        f"/api/agents/jobs/{job.pk}/complete/",
        {"run": run["run"], "agent": "a1", "output_valid": True},
        format="json",
    )
    assert done.status_code == 200, done.content
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.VERIFIED
    history = client_for(UserFactory(username="reader")).get(f"/api/workloads/{workload.pk}/")
    assert history.json()["history"][0]["evidence_job"] == job.pk


def test_a_lead_judges_the_output_on_the_job() -> None:
    queue = make_queue("q", {G5: 1})
    team = TeamFactory(name="t")
    share = make_share(queue, team, "s", {G5: 1})
    lead, member = make_lead(team, "lead"), make_member(team, "member")
    workload = Workload.objects.create(team=team, name="vision/x")
    job = make_job(
        share,
        member,
        state=JobState.SUCCEEDED,
        preemptions=2,
        workload=workload,
        finished_at=timezone.now(),
    )
    url = f"/api/jobs/{job.pk}/output/"
    assert client_for(member).post(url, {"valid": True}, format="json").status_code == 403
    missing = client_for(lead).post(url, {"note": "looks fine"}, format="json")
    assert missing.status_code == 400
    assert "valid" in missing.json()
    response = client_for(lead).post(url, {"valid": True, "note": "eval ok"}, format="json")
    assert response.status_code == 200
    assert response.json()["output_valid"] is True
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.VERIFIED
    response = client_for(lead).post(url, {"valid": False}, format="json")
    workload.refresh_from_db()
    assert workload.recovery_status == RecoveryStatus.FAILED
