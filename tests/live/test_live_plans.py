"""Capacity plans in the live scheduler: a plan's start and end are time-driven instants
of the cycle (like max pending deadlines). Nothing here asks for a cycle after setting
things up: the worker's own timer (``next_event_in``) starts and ends the plan on time.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from governance.models import Job, JobEvent, JobState
from governance.services import plans as plan_services
from tests.factories import TeamFactory, make_admin, make_lead, make_queue, make_share
from tests.live.conftest import wait_for

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

G5 = "ml.g5.xlarge"


def test_the_worker_starts_and_ends_a_plan_on_time(celery_worker_process: Any) -> None:
    queue = make_queue("live-plans", {G5: 1})
    team = TeamFactory(name="plan-team")
    share = make_share(queue, team, "plan-share", {G5: 1})
    lead = make_lead(team, "plan_lead")
    now = timezone.now()
    plan = plan_services.plan_create(
        actor=make_admin(),
        queue=queue,
        share=share,
        name="short",
        instance_type=G5,
        count=1,
        start=now + timedelta(seconds=3),
        end=now + timedelta(seconds=8),
        reason="A short plan for the live test.",
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=lead)[1]}")
    response = client.post(
        "/api/jobs/",
        {
            "share": share.pk,
            "name": "plan-only",
            "preferences": [{"plan": "short", "count": 1}],
            "duration": 10**6,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    waiting = Job.objects.get(pk=response.json()["id"])
    response = client.post(
        "/api/jobs/",
        {
            "share": share.pk,
            "name": "plan-first",
            "preferences": [{"plan": "short", "count": 1}, {"instance_type": G5, "count": 1}],
            "duration": 10**6,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    falling = Job.objects.get(pk=response.json()["id"])

    def on_demand_first() -> bool:
        """before the plan's start, the plan-first job runs on its on-demand fallback"""
        falling.refresh_from_db()
        return falling.state == JobState.RUNNING and falling.preference == 1

    wait_for(on_demand_first, timeout=10)

    def started_on_plan() -> bool:
        """at the plan's start, the worker's timer starts the plan-only job on it"""
        waiting.refresh_from_db()
        return waiting.state == JobState.RUNNING and waiting.plan_id == plan.pk

    wait_for(started_on_plan, timeout=15)
    assert waiting.run_started_at is not None and waiting.run_started_at >= plan.start

    def stopped_at_end() -> bool:
        """at the plan's end, the worker's timer stops the job on it (plan_ended)"""
        waiting.refresh_from_db()
        return waiting.state == JobState.PENDING and waiting.preemptions == 1

    wait_for(stopped_at_end, timeout=20)
    assert waiting.counted_preemptions == 0
    stop = JobEvent.objects.get(job=waiting, type="preempted")
    assert stop.data["reason"] == "plan_ended"
    assert stop.at >= plan.end
