"""Promises and reviews through ``/api/agreements/`` (docs/agreements.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import AgreementVersion
from tests.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def w() -> Any:
    return make_world()


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def create(w: Any, promises: list[dict[str, Any]]) -> Any:
    return api(w.red_lead).post(
        "/api/agreements/",
        {"title": "Red keeps its word", "shares": [w.red_share.pk], "promises": promises},
        format="json",
    )


GOODPUT = {"figure": "goodput", "comparison": ">=", "threshold": 0.9, "window_days": 30}


def test_promises_are_written_read_and_evaluated(w: Any) -> None:
    response = create(
        w,
        [
            {**GOODPUT, "share": w.red_share.pk},
            {
                "figure": "wait_to_start.entitled.p90",
                "team": w.red.pk,
                "comparison": "<=",
                "threshold": 3600,
                "window_days": 7,
            },
        ],
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert [(p["figure"], p["share"], p["team"], p["queue"]) for p in body["promises"]] == [
        ("goodput", w.red_share.pk, None, w.queue.pk),
        ("wait_to_start.entitled.p90", None, w.red.pk, w.queue.pk),
    ]
    assert all(p["state"] == "" for p in body["promises"])
    assert len(body["versions"][0]["promises"]) == 2

    evaluated = api(w.reviewer).post(f"/api/agreements/{body['id']}/evaluate/")
    assert evaluated.status_code == 200, evaluated.json()
    # nothing ran on the queue: both figures are null
    assert [(p["state"], p["value"]) for p in evaluated.json()["promises"]] == [
        ("no_data", None),
        ("no_data", None),
    ]
    assert evaluated.json()["promises"][0]["jobs"].startswith("/jobs/?")
    outsider = api(w.blue_lead).post(f"/api/agreements/{body['id']}/evaluate/")
    assert outsider.status_code == 403
    api(w.reviewer).post(f"/api/agreements/{body['id']}/evaluate/")
    history = api(w.red_member).get(f"/api/agreements/{body['id']}/history/").json()
    assert [len(row["evaluations"]) for row in history] == [2, 2]
    assert history[0]["evaluations"][0]["state"] == "no_data"
    last = api(w.red_member).get(f"/api/agreements/{body['id']}/history/?limit=1").json()
    assert [len(row["evaluations"]) for row in last] == [1, 1]
    bad = api(w.red_member).get(f"/api/agreements/{body['id']}/history/?limit=0")
    assert bad.status_code == 400 and "limit" in bad.json()


@pytest.mark.parametrize(
    ("promise", "field"),
    [
        ({**GOODPUT, "figure": "goodness"}, "promises[0].figure"),
        ({**GOODPUT, "threshold": 1.2}, "promises[0].threshold"),
        ({**GOODPUT, "threshold": -1}, "promises[0].threshold"),
        ({**GOODPUT, "window_days": 0}, "promises[0].window_days"),
        ({**GOODPUT, "window_days": 400}, "promises[0].window_days"),
        ({**GOODPUT, "comparison": "=="}, "promises[0].comparison"),
        ({**GOODPUT, "threshold": "high"}, "promises[0].threshold"),
        ({**GOODPUT, "share": None}, "promises[0].share"),
        ({**GOODPUT, "threshold": 10**400}, "promises[0].threshold"),
        ({**GOODPUT, "figure": ["goodput"]}, "promises[0].figure"),
        ({**GOODPUT, "queue": [1]}, "promises[0].queue"),
        ({**GOODPUT, "window_days": 7.5}, "promises[0].window_days"),
    ],
)
def test_bad_promises_are_400s_naming_the_field(
    w: Any, promise: dict[str, Any], field: str
) -> None:
    body = {"share": w.red_share.pk, **promise}
    response = create(w, [body])
    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()


def test_a_promise_about_a_share_of_another_agreement_is_refused(w: Any) -> None:
    response = create(w, [{**GOODPUT, "share": w.blue_share.pk}])
    assert response.status_code == 400
    assert response.json()["promises[0].share"] == ["Not a share of this agreement."]


def test_a_review_is_a_new_version_even_unchanged(w: Any) -> None:
    agreement = create(w, []).json()
    next_date = (timezone.localdate() + timedelta(days=90)).isoformat()
    response = api(w.reviewer).post(
        f"/api/agreements/{agreement['id']}/review/",
        {"version": 1, "note": "Still right: red used what it kept.", "review_by": next_date},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["version"] == 2 and response.json()["review_by"] == next_date
    review = AgreementVersion.objects.get(agreement_id=agreement["id"], version=2)
    assert review.review and review.reason == "Still right: red used what it kept."
    empty = api(w.reviewer).post(
        f"/api/agreements/{agreement['id']}/review/", {"version": 2, "note": " "}, format="json"
    )
    assert empty.status_code == 400 and "note" in empty.json()
    stale = api(w.reviewer).post(
        f"/api/agreements/{agreement['id']}/review/", {"version": 1, "note": "ok"}, format="json"
    )
    assert stale.status_code == 409
    member = api(w.red_member).post(
        f"/api/agreements/{agreement['id']}/review/", {"version": 2, "note": "ok"}, format="json"
    )
    assert member.status_code == 403
