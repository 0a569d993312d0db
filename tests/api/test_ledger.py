"""``/api/shares/{id}/ledger/`` and the ledger page: a lender whose capacity two shares
borrow, the reclaim that follows when its own work arrives, and the window's figures."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler.cycle.run import run_cycle
from tests.factories import make_job, make_lending_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


@pytest.fixture
def w(settings: Any) -> Any:
    """Capacity 6; lender L (LEND, 4); x and y (1 each, borrow unlimited) run 3 and 2:
    x borrows 2, y borrows 1, both from L (no capacity is unowned)."""
    settings.DEMO_TIME_FACTOR = 1
    return make_lending_world(6, {"lender": 4}, {"x": 3, "y": 2})


def test_the_ledger_names_both_borrowers_then_the_reclaim(w: Any) -> None:
    client = APIClient()
    client.force_authenticate(w.lead)
    url = f"/api/shares/{w.lender.pk}/ledger/"
    body = client.get(url).json()
    assert sorted((r["borrower_name"], r["instances"]) for r in body["now"]["lent"]) == [
        ("x", 2),
        ("y", 1),
    ]
    assert body["now"]["would_reclaim"] == []
    # The lender's own job for 3 arrives: it needs 2 of the 3 lent back.
    mine = make_job(
        w.lender,
        w.lead,
        name="lender-run",
        preferences=[{"instance_type": G5, "count": 3}],
        duration=10**6,
        submitted_at=timezone.now() - timedelta(seconds=1),
    )
    body = client.get(url).json()
    predicted = {(r["job"], r["by"]) for r in body["now"]["would_reclaim"]}
    assert predicted and all(by == mine.pk for _, by in predicted)
    reclaim_at = timezone.now()
    run_cycle(w.queue.pk, now=reclaim_at)
    window = {"from": (w.t0 - timedelta(seconds=60)).isoformat(), "to": timezone.now().isoformat()}
    after = client.get(url, window).json()
    assert {(r["job"], r["by"]) for r in after["reclaims_triggered"]} == predicted
    assert after["lost_work_caused"] == pytest.approx(
        sum(r["lost_work"] for r in after["reclaims_triggered"])
    )
    lent = {r["borrower_name"]: r["instance_seconds"] for r in after["lent"]}
    # x held 2 and y 1 of the lender's entitlement from t0 until the reclaim at least.
    held = (reclaim_at - w.t0).total_seconds()
    assert lent["x"] >= 2 * held - 1 and lent["y"] >= 1 * held - 1
    x_side = client.get(f"/api/shares/{w.x.pk}/ledger/", window).json()
    # The borrower's side says the same from its end (after the reclaim y, a lending
    # share itself, sits idle, so x may hold y's entitlement too).
    from_lender = [r for r in x_side["borrowed"] if r["lender_name"] == "lender"]
    assert [r["instance_seconds"] for r in from_lender] == [lent["x"]]


def test_bad_windows_are_400_naming_the_field(w: Any) -> None:
    client = APIClient()
    client.force_authenticate(w.lead)
    url = f"/api/shares/{w.lender.pk}/ledger/"
    assert "from" in client.get(url, {"from": "yesterday"}).json()
    assert "to" in client.get(url, {"from": "2026-01-10", "to": "2026-01-01"}).json()
    assert "to" in client.get(url, {"from": "2026-01-01", "to": "2026-06-01"}).json()
    assert APIClient().get(url).status_code in (401, 403)


def test_the_page_and_the_overview_link_to_the_ledger(w: Any) -> None:
    client = Client()
    client.force_login(w.lead)
    overview = client.get("/").content.decode()
    assert f"/shares/{w.lender.pk}/ledger/#lent-{G5}" in overview
    assert f"/shares/{w.x.pk}/ledger/#borrowed-{G5}" in overview
    team_view = client.get("/teams/").content.decode()  # the lead's team holds all three
    assert f"/shares/{w.lender.pk}/ledger/#lent-{G5}" in team_view
    assert f"/shares/{w.y.pk}/ledger/#borrowed-{G5}" in team_view
    page = client.get(f"/shares/{w.lender.pk}/ledger/").content.decode()
    assert "x-run" in page and "y-run" in page and "in reclaim order" in page
    bad = client.get(f"/shares/{w.lender.pk}/ledger/", {"from": "nope"})
    assert bad.status_code == 400 and "not an ISO 8601" in bad.content.decode()


def test_a_run_going_at_the_window_start_is_counted_from_the_start(w: Any) -> None:
    client = APIClient()
    client.force_authenticate(w.lead)
    stop = timezone.now() - timedelta(seconds=10)
    start = stop - timedelta(seconds=90)  # both runs began 600 s ago and still run
    body = client.get(
        f"/api/shares/{w.lender.pk}/ledger/", {"from": start.isoformat(), "to": stop.isoformat()}
    ).json()
    lent = {r["borrower_name"]: r["instance_seconds"] for r in body["lent"]}
    assert lent == {"x": pytest.approx(180, abs=0.01), "y": pytest.approx(90, abs=0.01)}
    assert body["reclaims_triggered"] == [] and body["lost_work_caused"] == 0
