"""The job form and page for interruption classes and constrained fallback
(docs/scheduling.md): a deadline as a date and time with its zone, a budget in the
queue's currency, an expected run time per preference and the two switches; each
problem beside its field; the job page says which preferences its deadline and budget
still allow, until when, and what each would cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from governance.models import InstanceType, Job
from tests.web.test_jobs import submit_data
from tests.web.test_overview import aws_world, client_for

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture
def world() -> Any:
    return aws_world()  # ml.g5.xlarge at 1.41 an hour, speed 1


def test_a_lead_submits_a_deadline_in_its_zone_a_budget_and_run_times(world: Any) -> None:
    client = client_for(world.member_vision)
    page = client.get("/jobs/new/").content.decode()
    assert 'name="deadline_zone"' in page and "Budget ($)" in page and "pref_runtime_0" in page
    response = client.post(
        "/jobs/new/",
        submit_data(
            world.background,
            duration="",
            pref_runtime_0=3600,
            deadline_date="2030-03-01",
            deadline_time="08:00",
            deadline_zone="Europe/Berlin",
            max_cost="400.00",
            preemptible="on",  # may_borrow left unticked
        ),
    )
    assert response.status_code == 302, response.context["form"].errors
    job = Job.objects.get(name="resnet-sweep")
    assert job.deadline == datetime(2030, 3, 1, 7, 0, tzinfo=UTC)
    assert job.max_cost == Decimal("400.00")
    assert job.preferences == [{"instance_type": G5, "count": 1, "runtime": 3600}]
    assert (job.may_borrow, job.preemptible) == (False, True)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"deadline_date": "2030-03-01"}, "deadline_date", "both the date and the time"),
        (
            {"deadline_date": "2030-03-01", "deadline_time": "08:00", "deadline_zone": "Mars/Base"},
            "deadline_zone",
            "not a time zone",
        ),
        ({"max_cost": "-1"}, "max_cost", ""),
        ({"max_cost": "1.00"}, "max_cost", "Every preference would cost more"),
        ({"pref_runtime_0": "0"}, "pref_runtime_0", ""),
    ],
)
def test_each_problem_is_beside_its_field(
    world: Any, fields: dict[str, Any], field: str, words: str
) -> None:
    # duration 3600 s on one g5 at 1.41 an hour: 1.41
    response = client_for(world.member_vision).post(
        "/jobs/new/", submit_data(world.background, duration=3600, **fields)
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors, errors
    assert words in " ".join(errors[field])
    assert not Job.objects.exists()


def test_the_job_page_says_which_choices_remain_until_when_and_at_what_cost(world: Any) -> None:
    InstanceType.objects.filter(name=G5).update(hourly_price=Decimal("3.60"))
    now = timezone.now()
    job = Job.objects.create(
        queue=world.background.queue,
        share=world.background,
        submitter=world.member_vision,
        name="report",
        preferences=[
            {"instance_type": G5, "count": 1, "runtime": 7200},
            {"instance_type": G5, "count": 2, "runtime": 600},
        ],
        submitted_at=now,
        deadline=now + timedelta(hours=1),
        max_cost=Decimal("1.00"),
        may_borrow=False,
    )
    page = client_for(world.member_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert "Deadline and budget" in page
    # first choice: 2 h at 3.60 = 7.20 > 1.00: over budget
    assert "$7.20" in page and "over budget" in page
    # second: 10 min on 2 = 1.20 > 1.00 as well
    assert "$1.20" in page
    assert "never borrows" in page
    Job.objects.filter(pk=job.pk).update(max_cost=Decimal("100"))
    page = client_for(world.member_vision).get(f"/jobs/{job.pk}/").content.decode()
    # the first needs 2 h but only 1 h is left: too late; the second until 50 min from now
    assert "too late" in page and "yes, if it starts by" in page
