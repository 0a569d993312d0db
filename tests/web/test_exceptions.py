"""Exceptions pages: list and review queue, filing, detail with history, decisions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, ExceptionState, Job, PriorityException
from governance.services import exceptions as exception_services
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def file_exception(world: Any, job: Job, priority: int = 700, **kw: Any) -> PriorityException:
    return exception_services.exception_file(
        actor=world.red_lead,
        team=world.red,
        job=job,
        priority=priority,
        justification=kw.pop("justification", "Release blocked."),
        expires_at=timezone.now() + timedelta(days=3),
        **kw,
    )


@pytest.fixture
def world() -> Any:
    w = make_world()
    w.job = make_job(w.red_share, w.red_member, name="red-train", priority=50)
    return w


@pytest.mark.parametrize("role", ["red_member", "red_lead", "blue_lead", "reviewer", "admin"])
def test_list_renders_for_every_signed_in_role(world: Any, role: str) -> None:
    exc = file_exception(world, world.job)
    response = client_for(getattr(world, role)).get(reverse("web:exceptions"))
    assert response.status_code == 200
    body = response.content.decode()
    assert f'href="/exceptions/{exc.pk}/"' in body
    assert "in 2 days" in body or "in 3 days" in body  # time to expiry
    # Only reviewers and admins get the review queue with decision buttons.
    assert ("Review queue" in body) == (role in ("reviewer", "admin"))


def test_anonymous_is_sent_to_sign_in(world: Any) -> None:
    response = Client().get(reverse("web:exceptions"))
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_review_queue_is_pending_oldest_first(world: Any) -> None:
    other = make_job(world.red_share, world.red_member, name="red-eval", priority=10)
    first = file_exception(world, world.job)
    second = file_exception(world, other)
    response = client_for(world.reviewer).get(reverse("web:exceptions"))
    queue = response.context["review_queue"]
    assert [e.pk for e in queue] == [first.pk, second.pk]


def test_filters_by_state_and_team(world: Any) -> None:
    exc = file_exception(world, world.job)
    c = client_for(world.reviewer)
    assert exc in c.get(reverse("web:exceptions"), {"state": "pending"}).context["page"].object_list
    assert not c.get(reverse("web:exceptions"), {"state": "approved"}).context["page"].object_list
    assert not c.get(reverse("web:exceptions"), {"team": world.blue.pk}).context["page"].object_list
    # htmx swaps only the results region.
    partial = c.get(
        reverse("web:exceptions"),
        {"team": world.red.pk},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="exception-results",
    )
    assert partial.status_code == 200
    assert b"<h1>" not in partial.content
    assert b'id="exception-results"' in partial.content


def test_file_form_lists_only_own_active_jobs_and_shares(world: Any) -> None:
    make_job(world.red_share, world.red_member, name="red-done", state="SUCCEEDED")
    make_job(world.blue_share, world.blue_lead, name="blue-train")
    response = client_for(world.red_lead).get(reverse("web:exception_new"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "red-train" in body
    assert "red-done" not in body
    assert "blue-train" not in body
    form = response.context["form"]
    assert [label for _, label in form.fields["share"].choices][1:] == ["red: main/red"]


@pytest.mark.parametrize("role", ["red_member", "reviewer", "admin"])
def test_file_form_is_forbidden_to_non_leads(world: Any, role: str) -> None:
    response = client_for(getattr(world, role)).get(reverse("web:exception_new"))
    assert response.status_code == 403


def test_filing_goes_through_the_service(world: Any) -> None:
    expires = (timezone.localtime() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    response = client_for(world.red_lead).post(
        reverse("web:exception_new"),
        {
            "job": world.job.pk,
            "priority": 800,
            "justification": "Release 4.2 blocked.",
            "expires_at": expires,
        },
    )
    exc = PriorityException.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("web:exception", args=[exc.pk])
    assert exc.state == ExceptionState.PENDING and exc.team == world.red
    entry = AuditEntry.objects.get(event_type=AuditEvent.EXCEPTION_FILED)
    assert entry.actor == world.red_lead


def test_filing_errors_are_shown_beside_their_fields(world: Any) -> None:
    past = (timezone.localtime() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    response = client_for(world.red_lead).post(
        reverse("web:exception_new"),
        {"job": world.job.pk, "priority": 10, "justification": "x", "expires_at": past},
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert "already use priority" in form.errors["priority"][0]
    assert "future" in form.errors["expires_at"][0]
    assert not PriorityException.objects.exists()


def test_filing_without_target_names_job_and_share(world: Any) -> None:
    expires = (timezone.localtime() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    response = client_for(world.red_lead).post(
        reverse("web:exception_new"),
        {"priority": 800, "justification": "x", "expires_at": expires},
    )
    assert response.status_code == 400
    assert response.context["form"].errors["job"] and response.context["form"].errors["share"]


def test_approve_raises_the_job_and_detail_shows_it(world: Any) -> None:
    exc = file_exception(world, world.job, priority=700)
    c = client_for(world.reviewer)
    response = c.post(
        reverse("web:exception_decide", args=[exc.pk, "approve"]), {"note": "Release-blocking."}
    )
    assert response.status_code == 302
    exc.refresh_from_db()
    world.job.refresh_from_db()
    assert exc.state == ExceptionState.APPROVED and world.job.priority == 700
    entry = AuditEntry.objects.get(event_type=AuditEvent.EXCEPTION_APPROVED)
    assert entry.actor == world.reviewer and entry.reason == "Release-blocking."
    detail = c.get(reverse("web:exception", args=[exc.pk])).content.decode()
    assert f'href="/jobs/{world.job.pk}/"' in detail
    assert "now runs at priority <strong>700</strong>" in detail
    assert "exception.approved" in detail and "job.reprioritised" in detail


def test_reject_from_the_queue_returns_to_the_list(world: Any) -> None:
    exc = file_exception(world, world.job)
    response = client_for(world.admin).post(
        reverse("web:exception_decide", args=[exc.pk, "reject"]), {"note": "No.", "next": "list"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("web:exceptions")
    exc.refresh_from_db()
    assert exc.state == ExceptionState.REJECTED and exc.decision_note == "No."


@pytest.mark.parametrize("role", ["red_lead", "red_member", "blue_lead"])
def test_non_reviewers_cannot_decide(world: Any, role: str) -> None:
    exc = file_exception(world, world.job)
    response = client_for(getattr(world, role)).post(
        reverse("web:exception_decide", args=[exc.pk, "approve"]), {"note": ""}
    )
    assert response.status_code == 403
    assert b"Only reviewers and admins decide exceptions." in response.content
    exc.refresh_from_db()
    assert exc.state == ExceptionState.PENDING


def test_deciding_twice_is_a_clear_error(world: Any) -> None:
    exc = file_exception(world, world.job)
    c = client_for(world.reviewer)
    c.post(reverse("web:exception_decide", args=[exc.pk, "reject"]))
    response = c.post(reverse("web:exception_decide", args=[exc.pk, "approve"]))
    assert response.status_code == 400
    assert b"Only pending exceptions can be decided" in response.content


def test_requester_withdraws_and_job_gets_its_priority_back(world: Any) -> None:
    exc = file_exception(world, world.job, priority=700)
    exception_services.exception_approve(actor=world.reviewer, exception=exc)
    c = client_for(world.red_lead)
    assert b"Withdraw" in c.get(reverse("web:exception", args=[exc.pk])).content
    response = c.post(reverse("web:exception_decide", args=[exc.pk, "withdraw"]), {"note": "Done."})
    assert response.status_code == 302
    exc.refresh_from_db()
    world.job.refresh_from_db()
    assert exc.state == ExceptionState.WITHDRAWN and world.job.priority == 50
    assert AuditEntry.objects.filter(event_type=AuditEvent.EXCEPTION_WITHDRAWN).exists()


def test_other_lead_cannot_withdraw(world: Any) -> None:
    exc = file_exception(world, world.job)
    response = client_for(world.blue_lead).post(
        reverse("web:exception_decide", args=[exc.pk, "withdraw"])
    )
    assert response.status_code == 403
    exc.refresh_from_db()
    assert exc.state == ExceptionState.PENDING


def test_unknown_exception_is_404(world: Any) -> None:
    c = client_for(world.reviewer)
    assert c.get(reverse("web:exception", args=[999])).status_code == 404
    assert c.post(reverse("web:exception_decide", args=[999, "approve"])).status_code == 404


def _grow(world: Any, n: int) -> None:
    for i in range(n):
        job = make_job(world.red_share, world.red_member, name=f"bulk-{i}", priority=5)
        exc = file_exception(world, job, priority=600 + i)
        if i % 3 == 1:
            exception_services.exception_approve(actor=world.admin, exception=exc, note="ok")
        elif i % 3 == 2:
            exception_services.exception_reject(actor=world.admin, exception=exc, note="no")


@pytest.mark.parametrize("url", ["list", "detail"], ids=["list", "detail"])
def test_query_counts_do_not_grow_with_data(world: Any, url: str) -> None:
    c = client_for(world.reviewer)

    def fetch() -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        target = (
            reverse("web:exceptions")
            if url == "list"
            else reverse(
                "web:exception", args=[PriorityException.objects.order_by("id").first().pk]
            )
        )
        with CaptureQueriesContext(connection) as ctx:
            assert c.get(target).status_code == 200
        return len(ctx.captured_queries)

    _grow(world, 3)
    small = fetch()
    _grow(world, 12)
    large = fetch()
    assert small == large
    assert small <= 15
