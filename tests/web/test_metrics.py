"""/metrics: the Prometheus endpoint exposes the gauges and counters of a known state,
and only to a bearer of METRICS_TOKEN or an admin.

State (the shape of the worked example in docs/scheduling.md): capacity 3 x ml.g5.xlarge; "bg"
LEND_AND_BORROW limit 1 (borrow limit 200%), "med" LEND limit 1, "prot" RESERVE limit 1. bg submits
three one-instance jobs. The first runs within bg's limit (own 1); the second borrows
(borrowed 1): no capacity is unowned (3 - 3 = 0), so it sits on med's idle (med lent 1);
prot's idle is reserved, so the third waits (bg pending 1). Admissions: 1 own, 1 borrow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from governance import metrics
from governance.services import runs
from scheduler.cycle.run import run_cycle
from tests.factories import (
    TeamFactory,
    make_admin,
    make_job,
    make_lead,
    make_member,
    make_queue,
    make_share,
)

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture(autouse=True)
def _fresh_counters(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1
    settings.METRICS_TOKEN = "scrape-secret"
    metrics._redis().delete(metrics.store_key())


@pytest.fixture
def state() -> Any:
    from types import SimpleNamespace

    queue = make_queue("aws", {G5: 3})
    teams = {n: TeamFactory(name=n) for n in ("bg-team", "med-team", "prot-team")}
    bg = make_share(
        queue, teams["bg-team"], "bg", {G5: 1}, policy="LEND_AND_BORROW", borrow_limit=200
    )
    make_share(queue, teams["med-team"], "med", {G5: 1}, policy="LEND")
    make_share(queue, teams["prot-team"], "prot", {G5: 1}, policy="RESERVE")
    lead = make_lead(teams["bg-team"], "bg_lead")
    t0 = timezone.now() - timedelta(seconds=30)
    jobs = [
        make_job(bg, lead, name=f"bg{i}", priority=10 - i, duration=3600, submitted_at=t0)
        for i in range(3)
    ]
    run_cycle(queue.pk, now=t0)
    return SimpleNamespace(queue=queue, bg=bg, jobs=jobs, lead=lead, t0=t0)


def scrape(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def share(name: str) -> tuple[tuple[str, str], ...]:
    team = {"bg": "bg-team", "med": "med-team", "prot": "prot-team"}[name]
    return tuple(sorted({"queue": "aws", "share": name, "team": team, "instance_type": G5}.items()))


def test_gauges_and_counters_of_a_known_state(state: Any) -> None:
    values = scrape(Client(), Authorization="Bearer scrape-secret")
    assert values[("gpushare_share_usage", share("bg"))] == 2
    assert values[("gpushare_share_own", share("bg"))] == 1
    assert values[("gpushare_share_borrowed", share("bg"))] == 1
    assert values[("gpushare_share_pending_jobs", share("bg"))] == 1
    assert values[("gpushare_share_lent", share("med"))] == 1
    assert values[("gpushare_share_idle", share("prot"))] == 1
    assert values[("gpushare_share_lent", share("prot"))] == 0
    assert values[("gpushare_share_limit", share("prot"))] == 1
    capacity = (("instance_type", G5), ("queue", "aws"))
    assert values[("gpushare_queue_capacity", capacity)] == 3
    assert values[("gpushare_admissions_total", (("rule", "own"),))] == 1
    assert values[("gpushare_admissions_total", (("rule", "borrow"),))] == 1
    assert values[("gpushare_cycle_duration_seconds_count", ())] == 1
    assert values[("gpushare_cycle_duration_seconds_bucket", (("le", "+Inf"),))] == 1
    assert values[("gpushare_cycle_duration_seconds_sum", ())] > 0


def test_preemptions_and_executor_errors_are_counted(
    state: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """med's job takes its instance back from bg's borrowing job: one reclaim preemption
    and one more own admission; then an agent-style lost run: one executor error."""
    med = state.queue.shares.get(name="med")
    med_lead = make_lead(med.team, "med_lead")
    make_job(med, med_lead, name="m1", priority=1, duration=60, submitted_at=state.t0)
    run_cycle(state.queue.pk, now=state.t0 + timedelta(seconds=5))
    running = state.jobs[0]
    with django_capture_on_commit_callbacks(execute=True):
        runs.run_declare_lost(
            job_id=running.pk, now=state.t0 + timedelta(seconds=6), explanation="silent"
        )
    values = scrape(Client(), Authorization="Bearer scrape-secret")
    assert values[("gpushare_preemptions_total", (("rule", "reclaim"),))] == 1
    assert values[("gpushare_admissions_total", (("rule", "own"),))] == 2
    assert values[("gpushare_executor_errors_total", (("kind", "lost"),))] == 1
    assert values[("gpushare_cycle_duration_seconds_count", ())] == 2


def test_who_may_read_it(state: Any) -> None:
    assert Client().get("/metrics").status_code == 403
    wrong = Client().get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    member = Client()
    member.force_login(make_member(state.bg.team, "bg_member"))
    assert member.get("/metrics").status_code == 403
    lead = Client()
    lead.force_login(state.lead)
    assert lead.get("/metrics").status_code == 403
    admin = Client()
    admin.force_login(make_admin())
    assert admin.get("/metrics").status_code == 200


def test_no_token_set_means_admins_only(state: Any, settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics", headers={"Authorization": "Bearer "}).status_code == 403


def test_the_grafana_dashboard_queries_exposed_metrics(state: Any) -> None:
    """Every metric docs/grafana-dashboard.json names is one /metrics exposes."""
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).parents[2] / "docs/grafana-dashboard.json").read_text())
    named = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"gpushare_[a-z_]+", target["expr"])
    }
    exposed = {name for name, _ in scrape(Client(), Authorization="Bearer scrape-secret")}
    # Families with no sample in this state are still declared (# TYPE lines).
    body = Client().get("/metrics", headers={"Authorization": "Bearer scrape-secret"})
    for line in body.content.decode().splitlines():
        if line.startswith("# TYPE "):
            exposed.add(line.split()[2])
    assert named and named <= exposed, named - exposed


def test_with_redis_away_counting_is_skipped_and_gauges_still_served(
    state: Any, monkeypatch: Any
) -> None:
    import redis

    monkeypatch.setattr(metrics, "_client", redis.Redis.from_url("redis://127.0.0.1:1/0"))
    monkeypatch.setattr(metrics, "_down_until", 0.0)
    metrics.observe_cycle(0.2)  # does not raise; Redis is then left alone for a while
    assert metrics._down_until > 0
    values = scrape(Client(), Authorization="Bearer scrape-secret")
    assert values[("gpushare_share_usage", share("bg"))] == 2
    assert ("gpushare_admissions_total", (("rule", "own"),)) not in values


def test_forecast_error_gauge(state: Any) -> None:
    """bg2 waits; its first estimate is recorded, then it starts 30 s later than that."""
    from governance.models import JobForecast
    from governance.selectors import scheduling

    waiting = state.jobs[2]
    found, _ = scheduling.forecast_jobs(state.queue.pk, [waiting.pk])
    assert found[waiting.pk]["estimated_start"] is not None
    estimate = JobForecast.objects.get(pk=waiting.pk).estimated_start
    waiting.started_at = estimate + timedelta(seconds=30)
    waiting.save(update_fields=["started_at"])
    values = scrape(Client(), Authorization="Bearer scrape-secret")
    labels = (("quantile", "0.5"), ("queue", "aws"))
    assert values[("gpushare_forecast_error_seconds", labels)] == 30.0
