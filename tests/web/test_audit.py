"""Audit trail page: reviewers and admins only, filters, readable diffs, keyset pages."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent
from governance.services import audit
from governance.web.audit import changes, flatten
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> Any:
    return make_world()


def entry_ids(response: Any) -> list[int]:
    """The ids of the entries a page of the trail lists, in its order."""
    return [int(pk) for pk in re.findall(r'<tr data-entry="(\d+)">', response.content.decode())]


def cursor(response: Any, direction: str) -> str | None:
    """The ``older``/``newer`` cursor of the page's pager link, as the browser sends it."""
    found = re.search(rf'href="\?[^"]*{direction}=([^"&]+)"', response.content.decode())
    return unquote(found.group(1)) if found else None


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def add_entries(world: Any, n: int, *, start: Any = None) -> None:
    start = start or timezone.now() - timedelta(days=1)
    for i in range(n):
        audit.record(
            event_type=AuditEvent.SHARE_UPDATED,
            actor=world.admin if i % 2 else world.reviewer,
            subject=world.red_share,
            before={"limits": {"ml.g5.xlarge": i}, "policy": "RESERVE", "version": i},
            after={"limits": {"ml.g5.xlarge": i + 1}, "policy": "RESERVE", "version": i + 1},
            reason=f"change {i}",
            team_id=world.red.pk if i % 2 else world.blue.pk,
            share_id=world.red_share.pk,
            at=start + timedelta(seconds=i),
        )


@pytest.mark.parametrize("role", ["reviewer", "admin"])
def test_reviewers_and_admins_read_the_trail(world: Any, role: str) -> None:
    add_entries(world, 3)
    response = client_for(getattr(world, role)).get(reverse("web:audit"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "limits.ml.g5.xlarge" in body
    assert "<del>1</del>" in body and "<ins>2</ins>" in body
    assert "change 1" in body
    assert 'href="/audit/"' in body  # in their nav


@pytest.mark.parametrize("role", ["red_lead", "red_member", "outsider"])
def test_others_get_403_and_no_nav_link(world: Any, role: str) -> None:
    c = client_for(getattr(world, role))
    assert c.get(reverse("web:audit")).status_code == 403
    assert b'href="/audit/"' not in c.get(reverse("web:exceptions")).content


def test_diff_shows_changed_keys_only_with_nested_keys_flattened() -> None:
    before = {"limits": {"ml.g5.xlarge": 1, "ml.p5.48xlarge": 2}, "policy": "LEND", "name": "a"}
    after = {"limits": {"ml.g5.xlarge": 3, "ml.p5.48xlarge": 2}, "policy": "LEND", "name": "a"}
    rows = changes(before, after)
    assert [(r.key, r.old, r.new) for r in rows] == [("limits.ml.g5.xlarge", 1, 3)]
    assert flatten({"a": {"b": {"c": 1}}}) == {"a.b.c": 1}
    created = changes(None, {"x": 1})
    assert created[0].has_new and not created[0].had_old


def test_filters_use_the_api_filter(world: Any) -> None:
    add_entries(world, 4)
    job = make_job(world.red_share, world.red_member)
    audit.record(
        event_type=AuditEvent.JOB_CANCELLED, actor=world.red_lead, subject=job, job_id=job.pk
    )
    c = client_for(world.reviewer)

    def ids(**params: Any) -> list[int]:
        response = c.get(reverse("web:audit"), params)
        assert response.status_code == 200
        return entry_ids(response)

    assert len(ids(actor="admin")) == 2
    assert len(ids(event_type="job.cancelled")) == 1
    assert len(ids(team=world.red.pk)) == 2
    assert len(ids(share=world.red_share.pk)) == 4
    assert len(ids(job=job.pk)) == 1
    since = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert len(ids(since=since)) == 1
    until = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert len(ids(until=until)) == 4


def test_bad_filter_is_400_with_message(world: Any) -> None:
    response = client_for(world.reviewer).get(reverse("web:audit"), {"event_type": "nope"})
    assert response.status_code == 400
    assert b"event_type" in response.content


def test_export_links_carry_the_filters(world: Any) -> None:
    body = client_for(world.reviewer).get(reverse("web:audit"), {"actor": "admin"}).content
    assert b'href="/api/audit/?actor=admin&amp;format=csv"' in body
    assert b'href="/api/audit/?actor=admin&amp;format=json"' in body
    export = client_for(world.reviewer).get("/api/audit/?actor=admin&format=csv")
    assert export.status_code == 200


def test_keyset_pages_older_and_newer(world: Any) -> None:
    add_entries(world, 120)
    c = client_for(world.admin)
    first = c.get(reverse("web:audit"))
    page1 = entry_ids(first)
    assert len(page1) == 50 and cursor(first, "newer") is None
    older = cursor(first, "older")
    second = c.get(reverse("web:audit"), {"older": older})
    page2 = entry_ids(second)
    assert len(page2) == 50 and not set(page1) & set(page2)
    expected = list(AuditEntry.objects.order_by("-created_at", "-id").values_list("pk", flat=True))
    assert page1 + page2 == expected[:100]
    back = c.get(reverse("web:audit"), {"newer": cursor(second, "newer")})
    assert entry_ids(back) == page1
    # No OFFSET and no COUNT(*) on the trail.
    with CaptureQueriesContext(connection) as ctx:
        c.get(reverse("web:audit"), {"older": older})
    trail = [q["sql"] for q in ctx.captured_queries if "governance_auditentry" in q["sql"]]
    assert trail and not any("OFFSET" in q or "COUNT(" in q for q in trail)


def test_htmx_swaps_only_the_results(world: Any) -> None:
    add_entries(world, 2)
    response = client_for(world.reviewer).get(
        reverse("web:audit"),
        {"actor": "admin"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="audit-results",
    )
    assert response.status_code == 200
    assert b'id="audit-results"' in response.content and b"<form" not in response.content


def test_query_count_is_constant(world: Any) -> None:
    c = client_for(world.admin)

    def count(**params: Any) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert c.get(reverse("web:audit"), params).status_code == 200
        return len(ctx.captured_queries)

    add_entries(world, 5)
    small = count(), count(share=world.red_share.pk)
    add_entries(world, 200, start=timezone.now() - timedelta(days=2))
    large = count(), count(share=world.red_share.pk)
    assert small == large


def test_cached_entry_cells_render_as_uncached(world: Any) -> None:
    """Each entry's cells are cached by entry (entries never change): a page served from
    the cache is the page rendered afresh, for a change, a creation and a deletion."""
    from django.core.cache import caches

    add_entries(world, 3)
    audit.record(
        event_type=AuditEvent.SHARE_CREATED,
        actor=world.admin,
        subject=world.red_share,
        before=None,
        after={"name": "red", "limits": {"ml.g5.xlarge": 2}},
        share_id=world.red_share.pk,
    )
    audit.record(
        event_type=AuditEvent.SHARE_DELETED,
        actor=None,
        subject=world.red_share,
        before={"name": "red", "enabled": True},
        after=None,
        reason="<b>gone</b>",
    )
    c = client_for(world.admin)

    def results() -> str:  # the page after its per-request CSRF token
        return c.get(reverse("web:audit")).content.decode().partition('id="audit-results"')[2]

    fresh = results()
    assert fresh.count("<tr") == 6
    assert results() == fresh
    assert "created with 2 fields" in fresh and "removed with 2 fields" in fresh
    assert "&lt;b&gt;gone&lt;/b&gt;" in fresh and "<b>gone</b>" not in fresh
    assert "<!--when-->" not in fresh and "<!--who-->" not in fresh
    caches["shared"].clear()
    assert results() == fresh


def test_cached_entries_show_the_actors_current_name(world: Any) -> None:
    add_entries(world, 2)
    c = client_for(world.admin)
    assert world.reviewer.username in c.get(reverse("web:audit")).content.decode()
    old = world.reviewer.username
    type(world.reviewer).objects.filter(pk=world.reviewer.pk).update(username="renamed-reviewer")
    page = c.get(reverse("web:audit")).content.decode()
    assert "renamed-reviewer" in page and f">{old}<" not in page
