"""Queue pages: the list, and one queue with shares, paginated jobs and why jobs wait."""

from __future__ import annotations

import time

import pytest
from django.core.cache import caches
from django.db.models import F

from governance.models import QueueCapacity
from governance.selectors import state_cache
from governance.services import jobs as job_services
from scheduler import readings
from scheduler.cycle.run import run_cycle
from tests.web.test_overview import aws_world, client_for, count_queries, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return aws_world()


@pytest.mark.parametrize("role", ["admin", "reviewer", "lead_vision", "member_vision"])
def test_queue_pages_for_every_role(world, role):
    client = client_for(getattr(world, role))
    listing = client.get("/queues/")
    assert listing.status_code == 200
    assert f'href="/queues/{world.queue.pk}/"' in listing.content.decode()
    detail = client.get(f"/queues/{world.queue.pk}/")
    assert detail.status_code == 200
    body = detail.content.decode()
    assert "aws-background" in body and "Lend and borrow" in body and "200%" in body
    assert f'hx-get="/queues/{world.queue.pk}/partials/usage/"' in body


def test_anonymous_and_unknown(world):
    assert client_for(None).get("/queues/").status_code == 302
    assert client_for(world.admin).get("/queues/999999/").status_code == 404


def test_pending_jobs_show_the_engines_reasons(world):
    submit(world.lead_vision, world.background, "bg-high", 3)
    submit(world.lead_vision, world.background, "bg-med", 2)
    submit(world.lead_vision, world.background, "bg-low", 1)
    run_cycle(world.queue.pk)
    body = client_for(world.member_vision).get(f"/queues/{world.queue.pk}/").content.decode()
    reasons = readings.explain_queue(world.queue.pk)[0]
    assert len(reasons) == 1
    (reason,) = next(iter(reasons.values()))
    assert reason["reason"] in body
    assert reason["message"].replace("'", "&#x27;") in body
    assert 'Running jobs <span class="muted small">(2)</span>' in body


def test_live_usage_partial(world):
    response = client_for(world.reviewer).get(f"/queues/{world.queue.pk}/partials/usage/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="queue-usage"' in body and "<html" not in body and "aws-medium" in body


def test_pending_jobs_are_paginated_and_queries_constant(world):
    client = client_for(world.lead_vision)
    url = f"/queues/{world.queue.pk}/"
    for name in ("first", "second", "third"):  # two run, one waits
        submit(world.lead_vision, world.background, name, 1)
    run_cycle(world.queue.pk)
    # Counted without cached answers (the worst case; state_cache caches reasons per state).
    caches["shared"].clear()
    small = count_queries(client, url)
    small_list = count_queries(client, "/queues/")
    for i in range(60):
        submit(world.lead_vision, world.background, f"wait-{i}", 1)
    run_cycle(world.queue.pk)
    body = client.get(url).content.decode()
    pending = body.partition("Pending jobs and why they wait")[2]
    assert "page 1 of 2" in pending
    assert pending.count('data-label="Waiting"') == 50
    assert "pending_page=2" in body
    caches["shared"].clear()
    assert count_queries(client, url) == small
    assert count_queries(client, "/queues/") == small_list


def test_cached_live_regions_show_a_change_on_the_next_poll(world):
    """The usage partials and the reasons are cached under a fingerprint of the stored
    state: a second poll with nothing changed is served from the cache with fewer
    queries, and any change (a submission, a cycle) shows on the very next poll."""
    client = client_for(world.reviewer)
    usage_url = f"/queues/{world.queue.pk}/partials/usage/"
    first = count_queries(client, usage_url)
    assert count_queries(client, usage_url) < first  # cached: nothing changed
    for name in ("first", "second", "third", "fourth"):
        submit(world.lead_vision, world.background, name, 1)
    body = client.get(usage_url).content.decode()
    assert "4 jobs pending" in body  # not the cached "0 jobs pending"
    run_cycle(world.queue.pk)
    body = client.get(usage_url).content.decode()
    assert "2 instances in use · 2 jobs pending" in body
    overview = client.get("/partials/usage/").content.decode()
    assert "2 instances in use · 2 jobs pending" in overview

    page = client.get(f"/queues/{world.queue.pk}/").content.decode()
    reasons = readings.explain_queue(world.queue.pk)[0]
    assert reasons
    for waiting in reasons:
        (reason,) = reasons[waiting]
        assert reason["message"].replace("'", "&#x27;") in page
        job_services.job_cancel(actor=world.admin, job=waiting, reason="not needed")
    page = client.get(f"/queues/{world.queue.pk}/").content.decode()
    assert not readings.explain_queue(world.queue.pk)[0]
    for waiting, (reason,) in reasons.items():
        assert f'href="/jobs/{waiting}/"' not in page  # no longer listed as pending
        assert reason["message"].replace("'", "&#x27;") not in page  # nor its stale reason


def test_a_change_without_an_event_shows_once_the_fingerprint_window_ends(world, monkeypatch):
    """A write that records neither a job event nor an audit entry (a heartbeat's
    progress, an edit in Django's admin site) leaves the queue's newest event and audit
    entry as they were, so the state fingerprint kept under them holds until its window
    (``FINGERPRINT_SECONDS``) ends; then the change shows, on the queue's partial and
    the overview's."""
    client = client_for(world.reviewer)
    usage_url = f"/queues/{world.queue.pk}/partials/usage/"
    before = client.get(usage_url).content.decode()
    overview_before = client.get("/partials/usage/").content.decode()
    QueueCapacity.objects.filter(queue=world.queue).update(count=F("count") + 40)  # no audit
    assert client.get(usage_url).content.decode() == before  # the window holds
    later = time.time() + state_cache.FINGERPRINT_SECONDS
    monkeypatch.setattr(state_cache.time, "time", lambda: later)
    after = client.get(usage_url).content.decode()
    assert after != before
    overview_after = client.get("/partials/usage/").content.decode()
    assert overview_after != overview_before
    capacity = QueueCapacity.objects.filter(queue=world.queue).first()
    assert capacity is not None and f"{capacity.count}" in after


def test_responses_carry_server_timing(world):
    response = client_for(world.reviewer).get("/queues/")
    assert response["Server-Timing"].startswith("app;dur=")
    assert float(response["Server-Timing"].removeprefix("app;dur=")) >= 0


def test_cached_job_tables_match_uncached_with_current_times(world):
    """The running and pending tables are cached under the queue's state and the
    reasons' generation: served from the cache they read as rendered afresh, with fewer
    queries, and their relative times are those of the moment of serving."""
    from datetime import timedelta
    from typing import Any
    from unittest.mock import patch

    from django.utils import timezone

    from governance.templatetags.web_time import relative_time

    client = client_for(world.reviewer)
    url = f"/queues/{world.queue.pk}/"
    for name in ("first", "second", "third", "fourth"):
        submit(world.lead_vision, world.background, name, 1)
    run_cycle(world.queue.pk)

    def tables() -> str:
        body = client.get(url).content.decode()
        return body[body.index("<h2>Running jobs") :]

    caches["shared"].clear()
    fresh = tables()
    assert "Running jobs" in fresh and ("ago</time>" in fresh or "just now</time>" in fresh)
    assert "<!--when-->" not in fresh
    assert tables() == fresh
    cold = count_queries(client, url)
    caches["shared"].clear()
    assert count_queries(client, url) > cold  # the second one read the tables' cache

    def later(t: Any, now: Any = None) -> str:  # the clock an hour on
        return relative_time(t, timezone.now() + timedelta(hours=1))

    with patch("governance.templatetags.web_time.relative_time", later):
        assert count_queries(client, url) == cold  # served from the cache
        shifted = tables()
    assert shifted != fresh and "1\xa0hour ago</time>" in shifted
    assert shifted.count("<time ") == fresh.count("<time ")


def test_the_queue_read_for_its_page_follows_a_change(world):
    """The queue with its capacity is kept under its state: a renamed queue or a new
    capacity shows on the next view."""
    from governance.services.capacity import queue_update

    client = client_for(world.admin)
    url = f"/queues/{world.queue.pk}/"
    assert "<h1>aws</h1>" in client.get(url).content.decode()
    queue_update(
        actor=world.admin,
        queue=world.queue,
        changes={"name": "cloud", "capacity": {"ml.g5.xlarge": 5}},
    )
    body = client.get(url).content.decode()
    assert "<h1>cloud</h1>" in body and "<h1>aws</h1>" not in body
    assert "<title>cloud" in body


def test_the_navigation_marks_the_current_section(world):
    """The navigation's links (written once per set of rights and section) mark the
    section of the page shown, on each page."""
    client = client_for(world.member_vision)
    body = client.get(f"/queues/{world.queue.pk}/").content.decode()
    assert '<a href="/queues/" aria-current="page">Queues</a>' in body
    assert '<a href="/">Overview</a>' in body and 'href="/admin/"' not in body
    body = client.get("/").content.decode()
    assert '<a href="/" aria-current="page">Overview</a>' in body
    assert '<a href="/queues/">Queues</a>' in body
