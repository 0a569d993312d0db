"""The Slurm completion hook's endpoint (``POST /api/slurm/job-ended/``): only the holder
of SLURM_HOOK_TOKEN may call it, bad input is a 400 naming the field, an unknown job is
answered without a pass, and a known one runs its queue's pass (tests/slurm runs it with
the local Slurm and the real epilog)."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import SlurmQueueConfig, SlurmRun
from governance.models.capacity import Executor
from tests.factories import TeamFactory, UserFactory, make_job, make_queue, make_share

pytestmark = pytest.mark.django_db
URL = "/api/slurm/job-ended/"
TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def hook(settings: Any) -> APIClient:
    settings.SLURM_HOOK_TOKEN = TOKEN
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    return client


def test_the_hook_is_off_without_a_token(settings: Any) -> None:
    settings.SLURM_HOOK_TOKEN = ""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer anything")
    response = client.post(URL, {"slurm_job_id": 5}, format="json")
    assert response.status_code == 403
    assert "SLURM_HOOK_TOKEN" in response.json()["detail"][0]


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Token {TOKEN}", "Bearer", TOKEN])
def test_only_the_token_holder_may_call(settings: Any, header: str | None) -> None:
    settings.SLURM_HOOK_TOKEN = TOKEN
    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post(URL, {"slurm_job_id": 5}, format="json")
    assert response.status_code == 403


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"slurm_job_id": "12"},
        {"slurm_job_id": 0},
        {"slurm_job_id": 2**40},
        {"slurm_job_id": True},
        {"slurm_job_id": None},
        [1, 2],
        {"slurm_job_id": 1.5},
    ],
)
def test_bad_input_names_the_field(hook: APIClient, body: Any) -> None:
    response = hook.post(URL, body, format="json")
    assert response.status_code == 400
    assert "slurm_job_id" in response.json()


def test_a_job_the_product_does_not_know_is_answered_without_a_pass(hook: APIClient) -> None:
    response = hook.post(URL, {"slurm_job_id": 424242}, format="json")
    assert response.status_code == 200
    assert response.json() == {"known": False, "queue": None, "executor_pass": None}


def test_a_known_job_runs_its_queues_pass(hook: APIClient, settings: Any) -> None:
    """With a Slurm that cannot be reached, the pass pauses the executor and says so: the
    hook ran the real pass of the job's queue."""
    settings.SLURM_CONF = "/nonexistent/slurm.conf"
    settings.SLURM_HOOK_GATHER_SECONDS = 0
    queue = make_queue("slurm", {"ml.g5.xlarge": 2})
    queue.executor = Executor.SLURM
    queue.save()
    share = make_share(queue, TeamFactory(name="t"), "s", {"ml.g5.xlarge": 2})
    job = make_job(share, UserFactory(username="u"), state="RUNNING", run=1)
    SlurmRun.objects.create(
        job=job, run=1, name="gov-1-r1", slurm_job_id=777, created_at=timezone.now()
    )
    response = hook.post(URL, {"slurm_job_id": 777}, format="json")
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["known"] is True and answer["queue"] == queue.pk
    assert answer["executor_pass"]["paused"] is True
    assert answer["executor_pass"]["reported"] == []
    assert SlurmQueueConfig.objects.get(queue=queue).paused_since is not None
