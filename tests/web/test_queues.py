"""Queue pages: the list, and one queue with shares, paginated jobs and why jobs wait."""

from __future__ import annotations

import pytest

from scheduler import bridge
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
    bridge.run_cycle(world.queue.pk)
    body = client_for(world.member_vision).get(f"/queues/{world.queue.pk}/").content.decode()
    reasons = bridge.explain_queue(world.queue.pk)
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
    bridge.run_cycle(world.queue.pk)
    small = count_queries(client, url)
    small_list = count_queries(client, "/queues/")
    for i in range(60):
        submit(world.lead_vision, world.background, f"wait-{i}", 1)
    bridge.run_cycle(world.queue.pk)
    response = client.get(url)
    assert response.context["pending"].paginator.num_pages == 2
    assert len(response.context["pending_rows"]) == 50
    assert "pending_page=2" in response.content.decode()
    assert count_queries(client, url) == small
    assert count_queries(client, "/queues/") == small_list
