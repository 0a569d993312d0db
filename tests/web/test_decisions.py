"""The decision page (docs/workloads.md#decisions): open decisions on the team view and
the overview; a lead answers with a form that shows every problem at once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from governance.models import Decision, Job
from tests.factories import make_decision_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
G6 = "ml.g6.xlarge"


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


@pytest.fixture
def world() -> Any:
    return make_decision_world()


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_open_and_overdue_decisions_show_on_the_team_view_overview_and_job(world: Any) -> None:
    reader = signed_in(world.member)
    link = f'href="/decisions/{world.decision.pk}/"'
    team_page = reader.get(f"/teams/{world.team.pk}/").content.decode()
    assert "Open decisions" in team_page and link in team_page
    assert "badge overdue" not in team_page
    Decision.objects.filter(pk=world.decision.pk).update(
        due_at=world.decision.opened_at - timedelta(minutes=1)
    )
    assert "badge overdue" in reader.get(f"/teams/{world.team.pk}/").content.decode()
    overview = reader.get("/").content.decode()
    assert "Decisions waiting" in overview and link in overview
    job_page = reader.get(f"/jobs/{world.job.pk}/").content.decode()
    assert link in job_page
    # A member reads the decision but gets no form to answer it.
    page = reader.get(f"/decisions/{world.decision.pk}/").content.decode()
    assert "exhausted" in page and "Resubmit</button>" not in page
    assert reader.post(f"/decisions/{world.decision.pk}/close/", {"reason": "x"}).status_code == 403


def test_the_resubmit_form_is_prefilled_and_shows_every_problem(world: Any) -> None:
    lead = signed_in(world.lead)
    page = lead.get(f"/decisions/{world.decision.pk}/").content.decode()
    assert "ml.g5.xlarge 1" in page and 'value="exhausted"' in page
    bad = lead.post(
        f"/decisions/{world.decision.pk}/resubmit/",
        {"name": "", "priority": "x", "preferences": "ml.nope 1", "note": ""},
    )
    assert bad.status_code == 400
    text = bad.content.decode()
    assert 'id="resubmit_name_errors"' in text and 'id="resubmit_priority_errors"' in text
    assert 'id="resubmit_preferences_errors"' in text and "ml.nope" in text
    assert Job.objects.count() == 2
    done = lead.post(
        f"/decisions/{world.decision.pk}/resubmit/",
        {"name": "again", "priority": "1", "preferences": "ml.g6.xlarge 1", "note": "g6"},
    )
    assert done.status_code == 302
    world.decision.refresh_from_db()
    new = world.decision.resubmitted_job
    assert new is not None and new.preferences == [{"instance_type": G6, "count": 1}]
    answered = lead.get(f"/decisions/{world.decision.pk}/").content.decode()
    assert f'href="/jobs/{new.pk}/"' in answered and "Resubmit</button>" not in answered
    assert f"/jobs/{world.job.pk}/" in lead.get(f"/jobs/{new.pk}/").content.decode()


def test_close_without_a_reason_says_so_beside_the_field(world: Any) -> None:
    lead = signed_in(world.lead)
    bad = lead.post(f"/decisions/{world.decision.pk}/close/", {"reason": ""})
    assert bad.status_code == 400 and 'id="close_reason_errors"' in bad.content.decode()
    assert (
        lead.post(f"/decisions/{world.decision.pk}/close/", {"reason": "retired"}).status_code
        == 302
    )
    world.decision.refresh_from_db()
    assert world.decision.state == "closed"


def test_reclassify_from_the_page(world: Any) -> None:
    lead = signed_in(world.lead)
    assert lead.post(f"/decisions/{world.decision.pk}/reclassify/", {"note": ""}).status_code == 302
    world.workload.refresh_from_db()
    assert world.workload.interruption == "protected"
    assert lead.get("/decisions/99999/").status_code == 404
    assert lead.post(f"/decisions/{world.decision.pk}/nope/", {}).status_code == 404


def test_open_decision_rows_are_read_in_one_query_however_many(world: Any) -> None:
    """The open decisions of the team view and the overview load only what their rows
    show (the job's name and workload, the team, when due) in one query: a field the
    rows would read beyond those would be a query per decision."""
    from django.db import connection
    from django.template.loader import render_to_string
    from django.test.utils import CaptureQueriesContext

    from governance.selectors import decisions as decision_selectors

    for i in range(3):
        other = Job.objects.create(
            queue=world.queue,
            share=world.share,
            name=f"failed-{i}",
            submitter=world.member,
            preferences=[{"instance_type": G5, "count": 1}],
            state="FAILED",
            workload=world.workload,
            submitted_at=world.decision.opened_at,
        )
        Decision.objects.create(
            job=other,
            team=world.team,
            due_at=world.decision.due_at,
            opened_at=world.decision.opened_at,
        )
    with CaptureQueriesContext(connection) as ctx:
        rows = list(decision_selectors.open_decisions(team_id=world.team.pk))
        html = render_to_string("decisions/_rows.html", {"decisions": rows, "show_team": True})
    assert len(ctx.captured_queries) == 1
    assert len(rows) == 4 and html.count("vision/finetune") == 4 and "failed-2" in html
