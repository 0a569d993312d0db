"""The agent protocol's one-round-trip options (docs/agents.md): ``start`` on a claim,
``claim_next`` on ``complete``/``fail``. Through the API, on the test database; the
in-request cycle is the scheduler's own ``run_cycle``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, Job, JobEvent, JobState
from governance.models.capacity import Executor
from governance.roles import AGENT_GROUP
from scheduler.cycle import kept
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, UserFactory, make_job, make_queue, make_share

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def w() -> Any:
    """An agent queue of one instance with three waiting jobs; the first is admitted."""
    queue = make_queue("agents", {G5: 1})
    queue.executor = Executor.AGENT
    queue.save()
    share = make_share(queue, TeamFactory(name="t"), "s", {G5: 1})
    submitter = UserFactory(username="submitter")
    jobs = [make_job(share, submitter, name=f"j{i}", duration=60) for i in range(3)]
    run_cycle(queue.pk)
    agent_user = UserFactory(username="agent-bot")
    agent_user.groups.add(Group.objects.get_or_create(name=AGENT_GROUP)[0])
    client = APIClient()
    client.force_authenticate(agent_user)
    return SimpleNamespace(queue=queue, jobs=jobs, client=client, agent_user=agent_user)


def types(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("id").values_list("type", flat=True))


def claim(w: Any, **body: Any) -> list[dict[str, Any]]:
    response = w.client.post(
        f"/api/agents/queues/{w.queue.pk}/claim/", {"agent": "a1", **body}, format="json"
    )
    assert response.status_code == 200, response.content
    return list(response.json())


def test_claim_with_start_records_the_started_report(w: Any) -> None:
    [run] = claim(w, start=True)
    first = w.jobs[0]
    assert (run["job"], run["run"]) == (first.pk, 1)
    assert types(first) == ["admitted", "claimed", "started"]
    started = AuditEntry.objects.get(event_type=AuditEvent.JOB_STARTED, job_id=first.pk)
    assert started.actor_id == w.agent_user.pk
    assert started.after == {"run": 1, "agent": "a1"}


def test_claim_without_start_leaves_the_report_to_the_agent(w: Any) -> None:
    claim(w)
    assert types(w.jobs[0]) == ["admitted", "claimed"]
    assert not AuditEntry.objects.filter(event_type=AuditEvent.JOB_STARTED).exists()


def test_complete_with_claim_next_hands_back_the_next_run(
    w: Any, django_capture_on_commit_callbacks: Any
) -> None:
    [run] = claim(w, start=True)
    with django_capture_on_commit_callbacks() as callbacks:
        response = w.client.post(
            f"/api/agents/jobs/{run['job']}/complete/",
            {"run": 1, "agent": "a1", "claim_next": 2, "start": True},
            format="json",
        )
    assert response.status_code == 200, response.content
    body = response.json()
    second = w.jobs[1]
    assert (body["job"], body["state"]) == (w.jobs[0].pk, JobState.SUCCEEDED)
    # One instance: the cycle in the request admitted exactly the next job, claimed here.
    assert [(n["job"], n["run"], n["instance_type"]) for n in body["next"]] == [(second.pk, 1, G5)]
    assert types(second) == ["admitted", "claimed", "started"]
    second.refresh_from_db()
    assert (second.state, second.agent) == (JobState.RUNNING, "a1")
    # The request ran the cycle itself: the worker is not asked for another (the one
    # callback left keeps the cycle's engine in this process, scheduler/cycle/kept.py).
    assert [getattr(c, "func", c) for c in callbacks] == [kept.keep]


def test_complete_without_claim_next_answers_as_before_and_asks_the_worker(
    w: Any, django_capture_on_commit_callbacks: Any
) -> None:
    [run] = claim(w)
    with django_capture_on_commit_callbacks() as callbacks:
        response = w.client.post(
            f"/api/agents/jobs/{run['job']}/complete/", {"run": 1}, format="json"
        )
    assert response.json() == {"job": w.jobs[0].pk, "state": JobState.SUCCEEDED}
    assert len(callbacks) == 1  # the cycle request, after commit
    assert Job.objects.get(pk=w.jobs[1].pk).state == JobState.PENDING


def test_claim_next_needs_the_agent_name_and_changes_nothing_without_it(w: Any) -> None:
    [run] = claim(w)
    response = w.client.post(
        f"/api/agents/jobs/{run['job']}/complete/", {"run": 1, "claim_next": 1}, format="json"
    )
    assert response.status_code == 400
    assert "agent" in response.json()
    assert Job.objects.get(pk=run["job"]).state == JobState.RUNNING


def test_fail_with_claim_next_and_an_empty_queue(w: Any) -> None:
    runs = claim(w)
    for job in w.jobs:
        [run] = runs
        assert run["job"] == job.pk
        response = w.client.post(
            f"/api/agents/jobs/{job.pk}/fail/",
            {"run": 1, "message": "boom", "agent": "a1", "claim_next": 1},
            format="json",
        )
        assert response.status_code == 200, response.content
        assert response.json()["state"] == JobState.FAILED
        runs = response.json()["next"]
    assert runs == []  # nothing left to admit: the agent goes back to polling


def test_a_stale_run_is_refused_with_claim_next_too(w: Any) -> None:
    [run] = claim(w)
    response = w.client.post(
        f"/api/agents/jobs/{run['job']}/complete/",
        {"run": 2, "agent": "a1", "claim_next": 1},
        format="json",
    )
    assert response.status_code == 409
    assert Job.objects.get(pk=w.jobs[1].pk).state == JobState.PENDING


def test_a_claimed_run_names_its_capacity_plan(w: Any) -> None:
    """A run admitted on a capacity plan tells the agent which reservation to use."""
    from datetime import timedelta

    from django.utils import timezone

    from governance.models import CapacityPlan, InstanceType

    [on_demand] = claim(w)
    assert on_demand["plan"] is None
    share = w.jobs[0].share
    CapacityPlan.objects.create(
        queue=w.queue,
        share=share,
        name="reserved",
        instance_type=InstanceType.objects.get(name=G5),
        count=1,
        start=timezone.now() - timedelta(hours=1),
        end=timezone.now() + timedelta(days=1),
    )
    planned = make_job(
        share, w.jobs[0].submitter, name="on-plan", preferences=[{"plan": "reserved", "count": 1}]
    )
    run_cycle(w.queue.pk)
    [run] = claim(w)
    assert (run["job"], run["plan"], run["instance_type"]) == (planned.pk, "reserved", G5)
