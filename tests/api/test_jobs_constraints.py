"""Jobs API: interruption classes and constrained fallback (docs/scheduling.md): the
fields ``may_borrow``, ``preemptible``, ``deadline``, ``max_cost`` and ``runtime`` per
preference, read back as given, each bad value a 400 naming its field, and a job whose
every preference is over its budget refused with a 400 naming ``max_cost``."""

from __future__ import annotations

from typing import Any

import pytest

from governance.models import Job
from tests.api.test_jobs import G5, P4, body, client_for
from tests.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def w() -> Any:
    return make_world()  # ml.g5.xlarge and ml.p4d.24xlarge at 1.41 an hour, speed 1


def test_the_fields_are_stored_and_read_back(w: Any) -> None:
    response = client_for(w, "member").post(
        "/api/jobs/",
        body(
            w,
            preferences=[
                {"instance_type": P4, "count": 1, "runtime": 1800},
                {"instance_type": G5, "count": 2, "runtime": 3600},
            ],
            may_borrow=False,
            preemptible=False,
            deadline="2030-01-06T08:00:00+01:00",
            max_cost="400.50",
        ),
        format="json",
    )
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["may_borrow"] is False and data["preemptible"] is False
    assert data["deadline"] == "2030-01-06T07:00:00Z"
    assert data["max_cost"] == 400.5
    assert [p.get("runtime") for p in data["preferences"]] == [1800, 3600]
    job = Job.objects.get(pk=data["id"])
    assert (job.may_borrow, job.preemptible, str(job.max_cost)) == (False, False, "400.50")
    read = client_for(w, "member").get(f"/api/jobs/{job.pk}/").json()
    assert read["deadline"] == data["deadline"] and read["max_cost"] == 400.5


def test_defaults_borrow_and_yield_with_no_deadline_nor_budget(w: Any) -> None:
    data = client_for(w, "member").post("/api/jobs/", body(w), format="json").json()
    assert (data["may_borrow"], data["preemptible"], data["deadline"], data["max_cost"]) == (
        True,
        True,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"may_borrow": "perhaps"}, "may_borrow"),
        ({"preemptible": "never"}, "preemptible"),
        ({"deadline": "tomorrow at eight"}, "deadline"),
        ({"max_cost": -1}, "max_cost"),
        ({"max_cost": "1.005"}, "max_cost"),
        ({"max_cost": "lots"}, "max_cost"),
        ({"max_cost": 10**15}, "max_cost"),
        ({"preferences": [{"instance_type": G5, "count": 1, "runtime": 0}]}, "preferences"),
        ({"preferences": [{"instance_type": G5, "count": 1, "runtime": "1h"}]}, "preferences"),
        ({"preferences": [{"instance_type": G5, "count": 1, "runtime": 10**12}]}, "preferences"),
    ],
)
def test_a_bad_value_is_a_400_naming_its_field(w: Any, fields: dict[str, Any], field: str) -> None:
    response = client_for(w, "member").post("/api/jobs/", body(w, **fields), format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not Job.objects.exists()


def test_every_preference_over_budget_is_refused_naming_max_cost(w: Any) -> None:
    # an hour of work: 1.41 on one instance of either type, 2.82 on two
    prefs = [{"instance_type": P4, "count": 1}, {"instance_type": G5, "count": 2}]
    response = client_for(w, "member").post(
        "/api/jobs/", body(w, preferences=prefs, duration=3600, max_cost="1.40"), format="json"
    )
    assert response.status_code == 400
    [message] = response.json()["max_cost"]
    assert "1 x ml.p4d.24xlarge about 1.41" in message and "2.82" in message
    assert not Job.objects.exists()
    # within budget on one of them: accepted (the scheduler passes over the other)
    response = client_for(w, "member").post(
        "/api/jobs/", body(w, preferences=prefs, duration=3600, max_cost="1.41"), format="json"
    )
    assert response.status_code == 201


def test_a_budget_without_any_known_run_time_is_accepted(w: Any) -> None:
    response = client_for(w, "member").post(
        "/api/jobs/", body(w, max_cost=0), format="json"
    )  # no duration, no runtime: the cost is unknown, so always eligible
    assert response.status_code == 201
    response = client_for(w, "member").post(
        "/api/jobs/",
        body(w, preferences=[{"instance_type": G5, "count": 1, "runtime": 60}], max_cost=0),
        format="json",
    )
    assert response.status_code == 400 and "max_cost" in response.json()
