"""Agreements pages: search, detail with versions/diffs/usage/reclaims, edit and create."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from governance.models import Agreement, AuditEntry, AuditEvent
from governance.services import agreements as agreement_services
from governance.services import audit
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> Any:
    w = make_world()
    w.agreement = agreement_services.agreement_create(
        actor=w.admin,
        title="Red training allocation",
        body="Red trains detectors and lends idle capacity.",
        shares=[w.red_share.pk],
        reclaim_assumptions="Borrowed runs may be reclaimed at once.",
        owner="red_lead",
    )
    return w


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def edit_payload(world: Any, **changes: Any) -> dict[str, Any]:
    data = {
        "title": world.agreement.title,
        "body": world.agreement.body,
        "reclaim_assumptions": world.agreement.reclaim_assumptions,
        "recovery_assumptions": "",
        "shares": [world.red_share.pk],
        "owner": "red_lead",
        "editors": [],
        "review_by": "",
        "reason": "",
        "version": world.agreement.version,
    }
    data.update(changes)
    return data


@pytest.mark.parametrize("role", ["red_member", "blue_lead", "reviewer", "admin"])
def test_list_and_detail_render_for_everyone(world: Any, role: str) -> None:
    c = client_for(getattr(world, role))
    assert world.agreement.title.encode() in c.get(reverse("web:agreements")).content
    detail = c.get(reverse("web:agreement", args=[world.agreement.pk]))
    assert detail.status_code == 200
    assert b"main/red" in detail.content
    assert (b">Edit</a>" in detail.content) == (role == "admin")


def test_search_ranks_and_highlights(world: Any) -> None:
    agreement_services.agreement_create(
        actor=world.admin, title="Blue", body="Nothing about it.", shares=[world.blue_share.pk]
    )
    response = client_for(world.red_member).get(reverse("web:agreements"), {"q": "detectors"})
    titles = re.findall(
        r'<li class="card result">\s*<h2><a href="[^"]+">([^<]+)</a>', response.content.decode()
    )
    assert titles == ["Red training allocation"]
    assert b"<mark>detectors</mark>" in response.content
    none = client_for(world.red_member).get(reverse("web:agreements"), {"q": "zebra"})
    assert b"No agreement matches" in none.content


def test_search_snippet_escapes_html(world: Any) -> None:
    agreement_services.agreement_create(
        actor=world.admin, title="Script", body="<script>alert(1)</script> quota"
    )
    response = client_for(world.admin).get(reverse("web:agreements"), {"q": "quota"})
    assert b"<script>alert" not in response.content


def test_owner_edits_through_the_service_and_versions_show_a_diff(world: Any) -> None:
    c = client_for(world.red_lead)
    response = c.post(
        reverse("web:agreement_edit", args=[world.agreement.pk]),
        edit_payload(world, body="Red trains detectors and segmenters.", reason="Scope grew."),
    )
    assert response.status_code == 302
    world.agreement.refresh_from_db()
    assert world.agreement.version == 2
    entry = AuditEntry.objects.get(event_type=AuditEvent.AGREEMENT_UPDATED)
    assert entry.actor == world.red_lead and entry.reason == "Scope grew."
    detail = c.get(reverse("web:agreement", args=[world.agreement.pk])).content.decode()
    assert "<del>lends idle capacity.</del>" in detail or "<del>" in detail
    assert "<ins>" in detail and "Scope grew." in detail


def test_stale_version_is_a_clear_conflict(world: Any) -> None:
    agreement_services.agreement_update(
        actor=world.admin, agreement=world.agreement, version=1, body="Changed by admin."
    )
    response = client_for(world.red_lead).post(
        reverse("web:agreement_edit", args=[world.agreement.pk]),
        edit_payload(world, version=1, body="My edit."),
    )
    assert response.status_code == 409
    assert b"Someone changed this agreement while you were editing" in response.content
    assert b"My edit." in response.content  # what the user typed is kept
    world.agreement.refresh_from_db()
    assert world.agreement.body == "Changed by admin."


@pytest.mark.parametrize("role", ["red_member", "blue_lead", "reviewer"])
def test_others_may_not_edit(world: Any, role: str) -> None:
    c = client_for(getattr(world, role))
    assert c.get(reverse("web:agreement_edit", args=[world.agreement.pk])).status_code == 403
    response = c.post(reverse("web:agreement_edit", args=[world.agreement.pk]), edit_payload(world))
    assert response.status_code == 403


def test_create_by_lead_with_field_errors(world: Any) -> None:
    c = client_for(world.blue_lead)
    form = c.get(reverse("web:agreement_new")).context["form"]
    assert [pk for pk, _ in form.fields["shares"].choices] == [world.blue_share.pk]
    bad = c.post(reverse("web:agreement_new"), {"title": "  ", "shares": [world.blue_share.pk]})
    assert bad.status_code == 400 and bad.context["form"].errors["title"]
    good = c.post(
        reverse("web:agreement_new"),
        {"title": "Blue allocation", "shares": [world.blue_share.pk], "reason": "New."},
    )
    created = Agreement.objects.get(title="Blue allocation")
    assert good.status_code == 302 and created.owner == world.blue_lead
    assert AuditEntry.objects.filter(
        event_type=AuditEvent.AGREEMENT_CREATED, actor=world.blue_lead
    ).exists()


@pytest.mark.parametrize("role", ["red_member", "reviewer"])
def test_create_forbidden_to_non_leads(world: Any, role: str) -> None:
    assert client_for(getattr(world, role)).get(reverse("web:agreement_new")).status_code == 403


def _reclaim(world: Any, victim_share: Any, by_share: Any, days_ago: int) -> None:
    job = make_job(victim_share, world.admin)
    audit.record(
        event_type=AuditEvent.JOB_PREEMPTED,
        actor=None,
        subject=job,
        after={"rule": "reclaim", "by_share": by_share.name, "by_job": None},
        share_id=victim_share.pk,
        queue_id=victim_share.queue_id,
        job_id=job.pk,
        at=timezone.now() - timedelta(days=days_ago),
    )


def test_usage_and_reclaim_counts(world: Any) -> None:
    make_job(
        world.red_share,
        world.admin,
        state="RUNNING",
        instance_type_id=world.red_share.limits.get(
            instance_type__name="ml.g5.xlarge"
        ).instance_type_id,
        preference=0,
        preferences=[{"instance_type": "ml.g5.xlarge", "count": 3}],
    )
    _reclaim(world, world.red_share, world.blue_share, 1)
    _reclaim(world, world.red_share, world.blue_share, 40)  # outside the window
    _reclaim(world, world.blue_share, world.red_share, 2)
    _reclaim(world, world.blue_share, world.red_share, 3)
    response = client_for(world.admin).get(reverse("web:agreement", args=[world.agreement.pk]))
    (row,) = response.context["linked"]
    g5 = next(t for t in row.types if t.instance_type == "ml.g5.xlarge")
    assert (g5.limit, g5.usage, g5.own, g5.borrowed, g5.idle) == (2, 3, 2, 1, 0)
    assert row.reclaimed_from == 1 and row.reclaimed_by == 2


def test_detail_query_count_is_constant(world: Any) -> None:
    c = client_for(world.admin)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert c.get(reverse("web:agreement", args=[world.agreement.pk])).status_code == 200
            assert c.get(reverse("web:agreements")).status_code == 200
            assert c.get(reverse("web:agreements"), {"q": "red"}).status_code == 200
        return len(ctx.captured_queries)

    small = count()
    for i in range(6):
        agreement_services.agreement_update(
            actor=world.admin, agreement=world.agreement, version=i + 1, body=f"Body {i}"
        )
        agreement_services.agreement_create(
            actor=world.admin,
            title=f"Other red {i}",
            shares=[world.red_share.pk, world.blue_share.pk],
        )
        _reclaim(world, world.red_share, world.blue_share, 1)
        make_job(world.red_share, world.admin, state="RUNNING", preference=0)
    assert count() == small


def test_list_marks_broken_promises_and_overdue_reviews(world: Any) -> None:
    """The list says which agreements need a look: promises broken at their last
    evaluation (linked to them) and a review date that has passed."""
    from governance.models import Promise, PromiseState

    kept = agreement_services.agreement_create(
        actor=world.admin,
        title="Blue inference allocation",
        body="Blue serves models.",
        shares=[world.blue_share.pk],
        promises=[
            {
                "figure": "goodput",
                "share": world.blue_share.pk,
                "comparison": ">=",
                "threshold": 0.9,
                "window_days": 7,
            },
            {
                "figure": "wait_to_start.entitled.p90",
                "share": world.blue_share.pk,
                "comparison": "<=",
                "threshold": 600,
                "window_days": 7,
            },
        ],
    )
    # the daily evaluation found one promise kept and one broken
    goodput, wait = Promise.objects.filter(agreement=kept).order_by("id")
    Promise.objects.filter(pk=goodput.pk).update(state=PromiseState.KEPT, value=0.95)
    Promise.objects.filter(pk=wait.pk).update(state=PromiseState.BROKEN, value=900)
    Agreement.objects.filter(pk=world.agreement.pk).update(
        review_by=timezone.localdate() - timedelta(days=3)
    )
    cards = _cards(world)
    blue, red = cards["Blue inference allocation"], cards["Red training allocation"]
    assert "1 promise broken" in blue and "review overdue" not in blue
    assert f'href="{reverse("web:agreement", args=[kept.pk])}#promises"' in blue
    assert "review overdue" in red and "promise" not in red
    # nothing is marked once the promise is kept again and the review date moved on
    Promise.objects.filter(pk=wait.pk).update(state=PromiseState.KEPT)
    Agreement.objects.filter(pk=world.agreement.pk).update(
        review_by=timezone.localdate() + timedelta(days=30)
    )
    for card in _cards(world).values():
        assert "badge" not in card and "overdue" not in card


def _cards(world: Any) -> dict[str, str]:
    """The agreements list's cards by the agreement's title."""
    page = client_for(world.reviewer).get(reverse("web:agreements")).content.decode()
    cards = page.split('<li class="card result">')[1:]
    return {card.split("</a>")[0].rsplit(">", 1)[1]: card.split("</li>")[0] for card in cards}
