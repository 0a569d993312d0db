"""A newcomer's walk (issue 33), the findings a page shows without a browser: each page
says what is true (an exception whose job ended, the priorities allowed with no bands,
why a job waits, when it may start), and an empty installation says how to begin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from governance.models import ExceptionState, PriorityDefinition
from governance.services import exceptions as exception_services
from governance.services import jobs as job_services
from tests.factories import make_job, make_world
from tests.web.test_overview import aws_world, client_for, submit

pytestmark = pytest.mark.django_db


def test_an_exception_whose_job_ended_offers_no_decision() -> None:
    w = make_world()
    job = make_job(w.red_share, w.red_member, priority=10)
    exc = exception_services.exception_file(
        actor=w.red_lead,
        team=w.red,
        job=job,
        priority=2000,
        justification="Release blocked.",
        expires_at=timezone.now() + timedelta(days=3),
    )
    reviewer = client_for(w.reviewer)
    assert "Approve" in reviewer.get(f"/exceptions/{exc.pk}/").content.decode()
    job_services.job_cancel(actor=w.red_member, job=job)
    page = reviewer.get(f"/exceptions/{exc.pk}/").content.decode()
    assert "Its job has ended: there is nothing left to raise" in page
    assert ">Approve<" not in page and ">Reject<" not in page
    # Nor in the review queue on the list page.
    listing = reviewer.get("/exceptions/").content.decode()
    assert f'action="/exceptions/{exc.pk}/approve/"' not in listing
    # A decision posted anyway (an old tab) closes it and says so, beside nothing wrong.
    response = reviewer.post(f"/exceptions/{exc.pk}/approve/", {"note": "ok"})
    assert response.status_code == 400
    assert "neither approved nor rejected" in response.content.decode()
    exc.refresh_from_db()
    assert exc.state == ExceptionState.CLOSED
    page = reviewer.get(f"/exceptions/{exc.pk}/").content.decode()
    assert "Closed: job ended" in page and "Closed without a decision" in page


def test_with_no_bands_the_job_page_says_every_priority_is_allowed() -> None:
    world = aws_world(bands=False)
    assert not PriorityDefinition.objects.exists()
    job = submit(world.lead_vision, world.background, "urgent", priority=900)
    page = client_for(world.lead_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert "No priority bands are defined yet, so any priority from 0 to 9999 is allowed." in page
    assert "You may use no band" not in page


def test_with_bands_the_job_page_names_the_highest_allowed() -> None:
    world = aws_world()
    job = submit(world.lead_vision, world.background, "normal", priority=10)
    page = client_for(world.member_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert "Change priority" not in page  # a member of another's job only reads
    page = client_for(world.lead_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert "without an approved exception." in page and "You may use up to" in page


def test_a_job_that_needs_more_than_is_free_says_not_enough_not_nothing() -> None:
    world = aws_world()
    # Capacity 3; the protected (RESERVE) share keeps one idle, so two are free to borrow
    # and the background share (limit 1, may borrow 200 %) asks for three.
    job = submit(
        world.lead_vision,
        world.background,
        "wide",
        preferences=[{"instance_type": "ml.g5.xlarge", "count": 3}],
    )
    page = client_for(world.lead_vision).get(f"/jobs/{job.pk}/").content.decode()
    assert "not enough free to borrow" in page
    assert "only 2 of the queue&#x27;s 3 are free" in page
    assert "nothing idle to borrow" not in page


def test_an_estimated_start_due_now_reads_as_the_next_cycle() -> None:
    from governance.templatetags.web_time import NEXT_CYCLE_WORDS, time_html

    now = timezone.now()
    assert NEXT_CYCLE_WORDS in time_html(now - timedelta(seconds=5), estimate=True)
    assert NEXT_CYCLE_WORDS in time_html(now + timedelta(seconds=30), estimate=True)
    assert "in 10\xa0minutes" in time_html(now + timedelta(minutes=10, seconds=20), estimate=True)
    assert "just now" in time_html(now - timedelta(seconds=5))  # a past event stays "just now"


def test_an_empty_installation_says_how_to_make_the_first_admin() -> None:
    page = Client().get("/login/").content.decode()
    assert "manage.py create_admin NAME" in page
    assert 'href="/docs/admin-guide/"' in page
    world = aws_world()
    assert world.admin.pk
    page = Client().get("/login/").content.decode()
    assert "create_admin" not in page


def test_the_admin_guide_is_a_page_linked_from_the_admin_page() -> None:
    world = aws_world()
    admin_page = client_for(world.admin).get("/admin/").content.decode()
    assert 'href="/docs/admin-guide/"' in admin_page
    guide = Client().get("/docs/admin-guide/")
    assert guide.status_code == 200
    body = guide.content.decode()
    assert "<h1>Admin guide: from an empty installation to a working queue</h1>" in body
    assert "Slurm cluster" in body and 'href="/docs/slurm/"' in body
    assert Client().get("/docs/nothing-here/").status_code == 404
    assert Client().get("/docs/..%2Fsettings/").status_code == 404


def test_the_share_forms_offer_as_many_rows_as_they_promise() -> None:
    world = aws_world()
    admin = client_for(world.admin)
    for url in (f"/shares/{world.medium.pk}/edit/", "/admin/shares/new/"):
        page = admin.get(url).content.decode()
        assert "up to 5 instance types" in page, url
        assert 'name="limit_type_4"' in page and 'name="limit_type_5"' not in page, url


def test_saving_an_unchanged_share_says_nothing_was_saved() -> None:
    from governance.models import AuditEntry
    from tests.web.test_shares import form_data

    world = aws_world()
    admin = client_for(world.admin)
    entries = AuditEntry.objects.count()
    response = admin.post(f"/shares/{world.medium.pk}/edit/", form_data(world.medium), follow=True)
    body = response.content.decode()
    assert "Nothing to save: share aws-medium already has these values" in body
    assert " saved" not in body.replace("Nothing to save", "")
    assert AuditEntry.objects.count() == entries
    response = admin.post(
        f"/shares/{world.medium.pk}/edit/",
        form_data(world.medium, limit_count_0=2),
        follow=True,
    )
    assert "Share aws-medium saved as version 2." in response.content.decode()


def test_the_exception_form_says_its_times_are_utc() -> None:
    world = aws_world()
    page = client_for(world.lead_vision).get("/exceptions/new/").content.decode()
    assert "Expires at (UTC)" in page and "Wanted by (UTC, optional)" in page
