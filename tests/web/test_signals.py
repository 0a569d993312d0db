"""The Signals page on the simulated history of ``tests/services/test_history.py``: charts
drawn server-side, every figure a link, and the links lead to the jobs behind them."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.test import Client

from governance.models import Job, JobState
from tests.services.test_history import at, clock, run_history, world  # noqa: F401

pytestmark = pytest.mark.django_db

WINDOW = {"from": "2025-03-03T07:59:59Z", "to": "2025-03-03T08:06:40Z"}


@pytest.fixture
def page_client(world: Any, clock: Any) -> Client:  # noqa: F811
    run_history(world, clock)
    clock.now = at(400)
    client = Client()
    client.force_login(world.red_lead)
    return client


def cells(html: str, signal: str) -> list[tuple[str, str]]:
    """(href, text) of the cells of one figure row."""
    row = re.search(rf"<code>{signal}</code>.*?</tr>", html, re.S)
    assert row, signal
    return [
        (unescape(href), text)
        for href, text in re.findall(
            r'<td class="wide" data-label="[^"]*"><a href="([^"]+)">([^<]*)</a></td>', row.group(0)
        )
    ]


def test_signals_page_draws_charts_and_links_every_figure(
    page_client: Client,
    world: Any,  # noqa: F811
) -> None:
    response = page_client.get("/signals/", {"queue": world.queue.pk, **WINDOW})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'href="/signals/"' in html  # in the navigation
    assert html.count('class="hbars"') == 4
    assert "h own" in html and "reclaim" in html  # numbers written beside the bars
    # Each chart has a labelled scale under its bars (its unit, none, half and all).
    assert html.count('class="hbar-row hbar-axis"') >= 3
    assert ">instance-hours<" in html and ">dollars<" in html
    for signal in ("jobs_finished", "wait_to_start", "preemptions_suffered", "cost", "goodput"):
        row = cells(html, signal)
        assert len(row) == 3  # whole queue, alpha, beta
        assert all(href.startswith(("/jobs/?", "/audit/?")) for href, _ in row)
    assert "Chargeback, 2025-03" in html


def test_a_figure_leads_to_the_jobs_behind_it(page_client: Client, world: Any) -> None:  # noqa: F811
    html = page_client.get("/signals/", {"queue": world.queue.pk, **WINDOW}).content.decode()
    _, _, beta = cells(html, "jobs_finished")
    href, text = beta
    assert text.startswith("4 (2 succeeded, 1 failed, 0 timed out, 1 cancelled)")
    listing = page_client.get(href).content.decode()
    finished = Job.objects.filter(share=world.beta, finished_at__isnull=False)
    assert finished.count() == 4
    for job in finished:
        assert f'href="/jobs/{job.pk}/"' in listing
    for job in Job.objects.filter(share=world.alpha):
        assert f'href="/jobs/{job.pk}/"' not in listing
    # the preemption figure leads to the audit entries of those preemptions
    audit_href, audit_text = cells(html, "preemptions_suffered")[2]
    assert audit_text.startswith("2 reclaim, 1 priority")
    assert "event_type=job.preempted" in audit_href and f"share={world.beta.pk}" in audit_href


def test_per_team_and_htmx_swaps_only_the_results(page_client: Client, world: Any) -> None:  # noqa: F811
    response = page_client.get(
        "/signals/",
        {"queue": world.queue.pk, "group_by": "team", **WINDOW},
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="signals-results">')
    assert "<th>red</th>" in html and "<th>blue</th>" in html
    started = cells(html, "wait_to_start")[1][0]
    assert "team=" in started and "started_after=" in started


def test_bad_windows_are_said_not_raised(page_client: Client, world: Any) -> None:  # noqa: F811
    response = page_client.get("/signals/", {"queue": world.queue.pk, "from": "soon", "to": ""})
    assert response.status_code == 200
    assert "is not an ISO 8601" in response.content.decode()
    response = page_client.get(
        "/signals/", {"queue": world.queue.pk, "from": "2025-01-01", "to": "2025-03-01"}
    )
    assert "at most 31 days" in response.content.decode()
    assert page_client.get("/signals/", {"queue": "x"}).status_code == 200


def test_the_jobs_list_filters_by_time(page_client: Client, world: Any) -> None:  # noqa: F811
    listing = page_client.get(
        "/jobs/",
        {"finished_after": "2025-03-03T08:00:40Z", "finished_before": "2025-03-03T08:01:00Z"},
    ).content.decode()
    inside = Job.objects.filter(finished_at__gte=at(40), finished_at__lt=at(60))
    assert inside.exists()
    for job in Job.objects.all():
        shown = f'href="/jobs/{job.pk}/"' in listing
        assert shown == (job in inside), job.name
    assert 'value="2025-03-03T08:00:40Z"' in listing  # the filter stays visible
    assert JobState.SUCCEEDED in {j.state for j in inside}


def test_a_queue_with_a_capacity_plan_shows_the_plan_figures(
    world: Any,  # noqa: F811
    clock: Any,  # noqa: F811
) -> None:
    from tests.services.test_history import run_plan_history

    run_plan_history(world, clock)
    clock.now = at(300)
    client = Client()
    client.force_login(world.red_lead)
    window = {"from": "2025-03-03T07:59:59Z", "to": "2025-03-03T08:05:00Z"}
    html = client.get("/signals/", {"queue": world.queue.pk, **window}).content.decode()
    queue_cell, alpha_cell, beta_cell = cells(html, "plan_utilization")
    assert "alpha-reserved" in queue_cell[1] and "alpha-reserved" in alpha_cell[1]
    assert beta_cell[1] == "—"  # beta has no plan
    assert cells(html, "plan_first_rate")[0][1] == "66.7 %"  # 2 of the 3 naming it first
