"""Issue 13, the page fixes: jobs that can never start say so (job page, queue page,
explain API, share preview), the share preview's warnings and its no-JavaScript button,
the job form's per-share types and row errors, exceptions on the job page, who files an
exception, names instead of ids in the audit trail and its CSV, time zones, the favicon,
share links on agreement pages and the overview's live claim."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.utils import timezone
from rest_framework.test import APIClient

from governance.models import Job, Share
from governance.services import agreements as agreement_services
from governance.services import exceptions as exception_services
from governance.templatetags.web_time import time_html
from scheduler.cycle.run import run_cycle
from tests.factories import InstanceTypeFactory
from tests.web.test_overview import aws_world, client_for, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return aws_world()


def two_g5(w: Any, share: Share, name: str = "too-big", count: int = 2) -> Job:
    return submit(
        w.lead_language if share == w.medium else w.lead_vision,
        share,
        name,
        preferences=[{"instance_type": "ml.g5.xlarge", "count": count}],
        duration=600,
    )


# --- Jobs that can never start as configured -------------------------------------------


def test_a_job_beyond_its_limit_that_cannot_borrow_says_so_with_what_would_let_it(world):
    job = two_g5(world, world.medium)  # LEND, limit 1: it can never hold 2
    run_cycle(world.queue.pk)
    body = client_for(world.lead_language).get(f"/jobs/{job.pk}/").content.decode()
    assert "This job can never start as configured." in body
    assert "raise its limit to 2" in body and "borrow limit of at least 100%" in body
    # The API says it per preference, in the same words.
    api = APIClient()
    api.force_authenticate(world.lead_language)
    reasons = api.get(f"/api/jobs/{job.pk}/explain/").json()["reasons"]
    assert [r["can_ever_start"] for r in reasons] == [False]
    assert "raise its limit to 2" in reasons[0]["what_would_let_it"]
    assert reasons[0]["reason"]  # the engine's code is still there
    # The queue page: sentences, not raw codes, and the same verdict.
    queue_page = client_for(world.lead_language).get(f"/queues/{world.queue.pk}/")
    text = queue_page.content.decode()
    assert "Can never start as configured" in text
    assert ">own_quota_full<" not in text and ">borrow_limit_reached<" not in text


def test_a_job_that_can_start_by_borrowing_is_not_called_hopeless(world):
    # background is LEND_AND_BORROW with 200%: limit 1 plus 2 borrowed reaches 3.
    job = two_g5(world, world.background, "fits-by-borrowing", count=3)
    blocker = submit(world.lead_language, world.medium, "holds-one", duration=3600)
    run_cycle(world.queue.pk)
    assert Job.objects.get(pk=blocker.pk).state == "RUNNING"
    body = client_for(world.lead_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert "Why it waits" in body and "can never start" not in body


def test_more_than_the_capacity_names_the_capacity(world):
    job = two_g5(world, world.background, "four", count=4)
    run_cycle(world.queue.pk)
    body = client_for(world.lead_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert "This job can never start as configured." in body
    assert "The queue has 3 \u00d7 ml.g5.xlarge in all" in body


# --- The share preview ---------------------------------------------------------------


def preview_data(share: Share, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "version": share.version,
        "policy": share.policy,
        "borrow_limit": "" if share.borrow_limit is None else share.borrow_limit,
        "limit_type_0": "ml.g5.xlarge",
        "limit_count_0": 1,
        "enabled": "on",
    }
    data.update(overrides)
    return data


def test_preview_warns_when_limits_would_add_up_above_capacity(world):
    response = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/preview/", preview_data(world.medium, limit_count_0=3)
    )
    body = response.content.decode()
    assert "Limits would add up to more than the capacity" in body
    assert "limits would add up to 5, capacity is 3 (over by 2)" in body
    quiet = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/preview/", preview_data(world.medium, limit_count_0=0)
    )
    assert "more than the capacity" not in quiet.content.decode()


def test_preview_lists_pending_jobs_that_could_never_start(world):
    two_g5(world, world.background, "needs-two")  # fits now: 1 + 200% borrowing
    response = client_for(world.admin).post(
        f"/shares/{world.background.pk}/preview/",
        preview_data(world.background, policy="RESERVE", borrow_limit=""),
    )
    body = response.content.decode()
    assert "Pending jobs that could never start" in body
    assert "needs-two" in body and "asks 2 \u00d7 ml.g5.xlarge, at most 1 possible" in body


def test_preview_button_without_javascript_shows_the_preview_and_saves_nothing(world):
    page = client_for(world.admin).get(f"/shares/{world.medium.pk}/edit/").content.decode()
    assert '<button type="submit" name="preview" value="1"' in page
    response = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/edit/",
        {**preview_data(world.medium, limit_count_0=2), "preview": "1"},
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "What this change would do" in body and "<ins>2 \u00d7 ml.g5.xlarge</ins>" in body
    assert Share.objects.get(pk=world.medium.pk).version == 1


# --- The job form --------------------------------------------------------------------


def test_job_form_lists_only_the_chosen_shares_types(world):
    only_language = InstanceTypeFactory(name="ml.p4d.24xlarge")
    world.queue.capacities.create(instance_type=only_language, count=2)
    world.medium.limits.create(instance_type=only_language, count=1)
    client = client_for(world.admin)
    chosen = client.get(f"/jobs/new/?share={world.background.pk}").content.decode()
    assert 'value="ml.p4d.24xlarge"' not in chosen
    assert 'value="ml.g5.xlarge"' in chosen
    # Before a share is chosen every type is offered, each naming its shares for the
    # script that narrows the list (the no-JavaScript page asks for the share first).
    unchosen = client.get("/jobs/new/").content.decode()
    assert f'value="ml.p4d.24xlarge" data-shares="{world.medium.pk}"' in unchosen
    assert "List this share&#x27;s instance types" in unchosen or (
        "List this share's instance types" in unchosen
    )


def test_job_form_errors_sit_beside_their_row_counted_from_one(world):
    client = client_for(world.member_vision)
    response = client.post(
        "/jobs/new/",
        {
            "share": world.background.pk,
            "name": "twice",
            "kind": "training",
            "priority": 1,
            "pref_type_0": "ml.g5.xlarge",
            "pref_count_0": 1,
            "pref_type_2": "ml.g5.xlarge",  # row 3 (row 2 left empty)
            "pref_count_2": 1,
        },
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert errors["pref_type_2"] == [
        "Preference 3: ml.g5.xlarge is listed twice; each type at most once."
    ]
    assert "preferences[" not in response.content.decode()


# --- Exceptions ----------------------------------------------------------------------


def test_exceptions_filed_for_a_job_appear_on_its_page(world):
    job = submit(world.lead_vision, world.background, "urgent", duration=600)
    exc = exception_services.exception_file(
        actor=world.lead_vision,
        team=world.vision.pk,
        job=job.pk,
        share=None,
        priority=900,
        justification="Deadline",
        wanted_by=None,
        expires_at=timezone.now() + timezone.timedelta(days=2),
    )
    body = client_for(world.member_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="/exceptions/{exc.pk}/">Exception {exc.pk}</a>: priority 900' in body
    assert "File an exception for this job" not in body  # a member cannot
    lead = client_for(world.lead_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert f"/exceptions/new/?job={job.pk}" in lead


@pytest.mark.parametrize(
    ("who", "says"),
    [
        ("lead_vision", "file an exception</a>"),
        ("member_vision", "ask your team lead (lead-vision) to file an exception"),
        ("admin", "a team&#x27;s lead files an exception"),
        ("reviewer", "a team&#x27;s lead files an exception"),
    ],
)
def test_priorities_page_tells_only_leads_to_file_an_exception(world, who, says):
    body = client_for(getattr(world, who)).get("/priorities/").content.decode()
    assert says in body.replace("a team's lead", "a team&#x27;s lead")
    if who != "lead_vision":
        assert "file an exception</a>" not in body


# --- Audit trail: names, CSV, time zones ---------------------------------------------


def test_audit_trail_shows_names_not_ids(world):
    job = submit(world.member_vision, world.background, "named", duration=600)
    body = client_for(world.reviewer).get("/audit/?event_type=job.submitted").content.decode()
    row = body[body.index("<tbody>") :]
    assert re.search(
        r"<dt>submitter</dt>\s*<dd><ins><span class=\"ref\" "
        rf"title=\"user id {world.member_vision.pk}\">member-vision</span>",
        row,
    )
    assert f'title="share id {world.background.pk}">{world.background.name}</span>' in row
    assert f">team {world.vision.pk}<" not in row and "vision</span>" in row
    assert job.pk  # the entry is the job's


def test_decided_by_shows_the_reviewers_name(world):
    job = submit(world.lead_vision, world.background, "raise-me", duration=600)
    exc = exception_services.exception_file(
        actor=world.lead_vision,
        team=world.vision.pk,
        job=job.pk,
        share=None,
        priority=900,
        justification="Deadline",
        wanted_by=None,
        expires_at=timezone.now() + timezone.timedelta(days=2),
    )
    exception_services.exception_reject(
        actor=world.reviewer, exception=exc.pk, note="Not this week."
    )
    body = client_for(world.reviewer).get("/audit/").content.decode()
    assert re.search(
        r"<dt>decided_by</dt>\s*<dd><del>null</del> → <ins><span class=\"ref\" "
        rf"title=\"user id {world.reviewer.pk}\">reviewer</span></ins>",
        body,
    )


def test_audit_csv_has_team_share_and_queue_names_beside_the_ids(world):
    submit(world.member_vision, world.background, "csv-job", duration=600)
    api = APIClient()
    api.force_authenticate(world.reviewer)
    response = api.get("/api/audit/?format=csv&event_type=job.submitted")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows and rows[0]["team"] == str(world.vision.pk)
    assert rows[0]["team_name"] == "vision"
    assert rows[0]["share_name"] == world.background.name
    assert rows[0]["queue_name"] == world.queue.name


def test_every_time_names_its_time_zone(world):
    assert time_html(timezone.now()).count(' UTC"') == 1
    submit(world.member_vision, world.background, "tz", duration=600)
    body = client_for(world.reviewer).get("/audit/").content.decode()
    assert re.search(r'<div class="small muted">\w{3} \d+, \d\d:\d\d:\d\d UTC</div>', body)


# --- Small things --------------------------------------------------------------------


def test_favicon_is_served(world):
    response = client_for(None).get("/favicon.ico")
    assert response.status_code == 302 and response["Location"].endswith("favicon.ico")
    path = finders.find("favicon.ico")
    assert path is not None
    with open(path, "rb") as icon:
        assert icon.read(4) == b"\x00\x00\x01\x00"  # an ICO header
    page = client_for(world.admin).get("/").content.decode()
    assert 'rel="icon"' in page


def test_no_space_between_just_now_and_its_comma(world):
    job = two_g5(world, world.medium, "spacing")  # stays pending
    body = client_for(world.lead_language).get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(r'<span class="since">submitted <time [^>]*>just now</time>, not', body)


def test_share_names_on_agreement_pages_are_links(world):
    agreement = agreement_services.agreement_create(
        actor=world.admin,
        title="Vision's training capacity",
        body="Why",
        shares=[world.background.pk],
        owner=world.lead_vision.username,
    )
    share_link = f'<a href="/shares/{world.background.pk}/">'
    assert share_link in client_for(world.admin).get("/agreements/").content.decode()
    detail = client_for(world.admin).get(f"/agreements/{agreement.pk}/").content.decode()
    assert share_link in detail


def test_overview_claims_live_updates_only_with_javascript(world):
    body = client_for(world.admin).get("/").content.decode()
    assert '<span class="muted small live-note js-only" hidden>Updates live' in body
    assert "<noscript>" in body and "reload to see newer ones" in body


def test_filing_from_the_job_page_preselects_the_job_and_keeps_the_default_expiry(world):
    job = submit(world.lead_vision, world.background, "from-its-page", duration=600)
    body = client_for(world.lead_vision).get(f"/exceptions/new/?job={job.pk}").content.decode()
    assert re.search(rf'<option value="{job.pk}"[^>]*selected', body)
    assert re.search(r'name="expires_at"[^>]*value="\d{4}-\d\d-\d\dT\d\d:\d\d', body)


def test_without_javascript_picking_a_share_narrows_the_rows_and_submits_nothing(world):
    only_language = InstanceTypeFactory(name="ml.p4d.24xlarge")
    world.queue.capacities.create(instance_type=only_language, count=2)
    world.medium.limits.create(instance_type=only_language, count=1)
    response = client_for(world.admin).post(
        "/jobs/new/", {"share": world.background.pk, "name": "kept", "pick": "1"}
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert 'value="ml.p4d.24xlarge"' not in body and 'value="ml.g5.xlarge"' in body
    assert 'value="kept"' in body and "This field is required" not in body
    assert not Job.objects.filter(name="kept").exists()
