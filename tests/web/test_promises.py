"""Promises and reviews on the agreement pages (docs/agreements.md)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from governance.models import (
    Agreement,
    AgreementVersion,
    JobEvent,
    JobState,
    Notification,
    NotificationKind,
)
from governance.services import agreements as agreement_services
from governance.services import promises as promise_services
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> Any:
    w = make_world()
    w.agreement = agreement_services.agreement_create(
        actor=w.admin, title="Red training", shares=[w.red_share.pk], owner="red_lead"
    )
    return w


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def edit(world: Any, **promise: Any) -> dict[str, Any]:
    return {
        "title": "Red training",
        "shares": [world.red_share.pk],
        "owner": "red_lead",
        "version": world.agreement.version,
        "reason": "owners wait less than an hour",
        **promise,
    }


def test_a_promise_is_added_from_a_list_of_figures(world: Any) -> None:
    client = client_for(world.red_lead)
    page = client.get(f"/agreements/{world.agreement.pk}/edit/").content.decode()
    assert '<option value="wait_to_start.entitled.p90">' in page
    assert f'<option value="share:{world.red_share.pk}">' in page
    assert f'<option value="team:{world.red.pk}:{world.queue.pk}">' in page
    response = client.post(
        f"/agreements/{world.agreement.pk}/edit/",
        edit(
            world,
            promise_figure="wait_to_start.entitled.p90",
            promise_subject=f"share:{world.red_share.pk}",
            promise_comparison="<=",
            promise_threshold="3600",
            promise_window_days="30",
        ),
    )
    assert response.status_code == 302
    promise = world.agreement.promises.get()
    assert (promise.figure, promise.share_id, promise.threshold, promise.window_days) == (
        "wait_to_start.entitled.p90",
        world.red_share.pk,
        3600.0,
        30,
    )
    detail = client.get(f"/agreements/{world.agreement.pk}/").content.decode()
    # the threshold is written as what the figure counts (seconds), the number in its title
    assert 'wait_to_start.entitled.p90</code> &lt;= <span title="3600">60 min</span>' in detail
    assert "not evaluated yet" in detail


def test_an_impossible_threshold_is_an_error_beside_its_field(world: Any) -> None:
    response = client_for(world.red_lead).post(
        f"/agreements/{world.agreement.pk}/edit/",
        edit(
            world,
            promise_figure="goodput",
            promise_subject=f"share:{world.red_share.pk}",
            promise_comparison=">=",
            promise_threshold="1.5",
            promise_window_days="30",
        ),
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert form.errors["promise_threshold"] == ["goodput is a fraction: give a number from 0 to 1."]
    assert not world.agreement.promises.exists()


def test_the_promises_problems_come_with_the_forms_own_in_one_answer(world: Any) -> None:
    """A title left empty (the form's check) does not hide the promise's problems (the
    service's rules, asked in a dry run): every message after one submit."""
    data = edit(
        world,
        promise_figure="goodput",
        promise_subject=f"share:{world.red_share.pk}",
        promise_comparison=">=",
        promise_threshold="1.5",
        promise_window_days="0",
    )
    response = client_for(world.red_lead).post(
        f"/agreements/{world.agreement.pk}/edit/", {**data, "title": ""}
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert form.errors["title"] == ["This field is required."]
    assert form.errors["promise_threshold"] == ["goodput is a fraction: give a number from 0 to 1."]
    assert form.errors["promise_window_days"] == ["A whole number of days from 1 to 365."]
    assert not world.agreement.promises.exists()
    assert Agreement.objects.get(pk=world.agreement.pk).version == world.agreement.version


def test_evaluate_now_shows_the_state_and_a_chart_and_withdrawing_keeps_history(
    world: Any,
) -> None:
    agreement_services.agreement_update(
        actor=world.admin,
        agreement=world.agreement,
        version=1,
        promises=[
            {
                "figure": "jobs_finished.total",
                "share": world.red_share.pk,
                "comparison": ">=",
                "threshold": 1,
                "window_days": 7,
            }
        ],
    )
    client = client_for(world.reviewer)
    response = client.post(f"/agreements/{world.agreement.pk}/evaluate/")
    assert response.status_code == 302
    page = client.get(f"/agreements/{world.agreement.pk}/").content.decode()
    assert '<span class="badge broken">Broken</span>' in page  # no job finished: 0 < 1
    assert '<svg class="promise-chart"' in page
    assert "1 broken" in page
    # a member of the team may not ask
    assert (
        client_for(world.red_member).post(f"/agreements/{world.agreement.pk}/evaluate/").status_code
        == 403
    )
    promise = world.agreement.promises.get()
    response = client_for(world.red_lead).post(
        f"/agreements/{world.agreement.pk}/edit/",
        {**edit(world), "version": 2, "withdraw": [promise.pk]},
    )
    assert response.status_code == 302
    promise.refresh_from_db()
    assert promise.removed_in_version == 3 and promise.evaluations.count() == 1


def test_a_review_is_recorded_as_a_version_with_its_note(world: Any) -> None:
    client = client_for(world.reviewer)
    next_date = timezone.localdate() + timedelta(days=180)
    empty = client.post(f"/agreements/{world.agreement.pk}/review/", {"version": 1, "note": ""})
    assert empty.status_code == 400
    assert empty.context["review_form"].errors["note"]
    response = client.post(
        f"/agreements/{world.agreement.pk}/review/",
        {"version": 1, "note": "Still fits.", "review_by": next_date.isoformat()},
    )
    assert response.status_code == 302
    agreement = Agreement.objects.get(pk=world.agreement.pk)
    assert agreement.version == 2 and agreement.review_by == next_date
    version = AgreementVersion.objects.get(agreement=agreement, version=2)
    assert version.review and version.reason == "Still fits."
    page = client.get(f"/agreements/{world.agreement.pk}/").content.decode()
    assert '<strong>Version 2</strong> <span class="badge">review</span>' in page


def test_the_figures_offered_are_the_signals_own(world: Any) -> None:
    figures = promise_services.figure_choices()
    assert "goodput" in figures and "wait_to_start.entitled.p90" in figures
    assert "preemptions_per_finished_job" in figures and "fallback_rate" in figures
    assert not any(f.startswith(("cost.ml.", "instance_seconds.")) for f in figures)


def test_broken_promises_and_overdue_reviews_show_where_people_look(world: Any) -> None:
    agreement_services.agreement_update(
        actor=world.admin,
        agreement=world.agreement,
        version=1,
        review_by=timezone.localdate() - timedelta(days=3),
        promises=[
            {
                "figure": "jobs_finished.total",
                "team": world.red.pk,
                "comparison": ">=",
                "threshold": 1,
                "window_days": 7,
            }
        ],
    )
    promise_services.promises_evaluate()  # nothing finished: broken
    words = "jobs_finished.total &gt;= 1 for team red over 7 days"
    overview = client_for(world.red_member).get("/").content.decode()
    assert words in overview and "Reviews overdue" in overview
    share_page = client_for(world.red_member).get(f"/shares/{world.red_share.pk}/")
    assert words in share_page.content.decode()
    other_share = client_for(world.red_member).get(f"/shares/{world.blue_share.pk}/")
    assert words not in other_share.content.decode()
    reviewers = client_for(world.reviewer).get("/exceptions/").content.decode()
    assert "Reviews overdue" in reviewers and "Red training" in reviewers
    # the version that added it says so, naming the team
    page = client_for(world.red_member).get(f"/agreements/{world.agreement.pk}/")
    assert "<ins>jobs_finished.total &gt;= 1 for team red over 7 days</ins>" in (
        page.content.decode()
    )


def test_a_promise_is_written_as_what_its_figure_counts(world: Any) -> None:
    """docs/agreements.md#promises: a wait reads as a duration and a goodput as a
    percentage on the agreement page, its chart and the notification; the API keeps the
    number."""
    now = timezone.now()
    job = make_job(
        world.red_share,
        world.red_lead,
        name="waited",
        submitted_at=now - timedelta(hours=4),
        duration=1800,
        state=JobState.SUCCEEDED,
        finished_at=now - timedelta(minutes=30),
    )
    admitted = {"instance_type": "ml.g5.xlarge", "count": 1, "preference": 0, "borrowed": 0}
    JobEvent.objects.create(job=job, at=now - timedelta(hours=1), type="admitted", data=admitted)
    JobEvent.objects.create(job=job, at=now - timedelta(minutes=30), type="completed", data={})
    promise = {"share": world.red_share.pk, "window_days": 7}
    agreement_services.agreement_update(
        actor=world.admin,
        agreement=world.agreement,
        version=1,
        promises=[
            {
                **promise,
                "figure": "wait_to_start.entitled.p90",
                "comparison": "<=",
                "threshold": 3600,
            },
            {**promise, "figure": "goodput", "comparison": ">=", "threshold": 0.9},
        ],
    )
    response = client_for(world.reviewer).post(f"/agreements/{world.agreement.pk}/evaluate/")
    assert response.status_code == 302
    wait, goodput = world.agreement.promises.order_by("id")
    assert (wait.state, wait.value) == ("broken", 10800.0)  # 3 h waited, 1 h promised
    assert (goodput.state, goodput.value) == ("kept", 1.0)

    page = client_for(world.red_member).get(f"/agreements/{world.agreement.pk}/").content.decode()
    assert '&lt;= <span title="3600">60 min</span>' in page
    assert '<span class="promise-value" title="10800">3.0 h</span>' in page
    assert '&gt;= <span title="0.9">90.0 %</span>' in page
    assert '<span class="promise-value" title="1">100.0 %</span>' in page
    assert "10800" not in page.replace('title="10800"', "")  # never the raw seconds
    # the chart: the threshold's tick and each dot's value
    assert 'text-anchor="end">60 min</text>' in page
    assert "UTC: 3.0 h (broken)</title>" in page
    # the overview's broken promises, and the notification the owner got
    overview = client_for(world.red_member).get("/").content.decode()
    assert "wait_to_start.entitled.p90 &lt;= 60 min for share" in overview
    assert re.search(r"; was (<a [^>]*>)?3\.0 h", overview)
    told = Notification.objects.get(recipient=world.red_lead, kind=NotificationKind.PROMISE_BROKEN)
    assert "wait_to_start.entitled.p90 <= 60 min for share" in told.title
    assert told.body.startswith("The figure was 3.0 h over ")
    # the API keeps the raw numbers
    answer = client_for(world.red_member).get(f"/api/agreements/{world.agreement.pk}/").json()
    assert [p["value"] for p in answer["promises"]] == [10800.0, 1.0]


def test_each_figure_says_what_it_counts() -> None:
    from governance.selectors import scheduling

    units = {path: scheduling.promise_unit(path) for path in scheduling.promise_figures()}
    assert {units[p] for p in ("wait_to_start.entitled.p90", "turnaround.all.p50")} == {"seconds"}
    assert units["time_to_restart.p90"] == units["lost_work"] == "seconds"
    assert {units[p] for p in ("goodput", "fallback_rate", "deadlines.rate")} == {"fraction"}
    assert units["cost.total.own"] == "money"
    assert units["preemptions_per_finished_job"] == "ratio"
    assert {units[p] for p in ("jobs_finished.total", "policy_changes.share_edits")} == {"count"}
    assert units["preemptions_suffered.reclaim"] == units["deadlines.met"] == "count"
