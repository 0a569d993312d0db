"""The lending ledger's reading of now: whose idle entitlement borrowers hold, and the
"would reclaim now" list, which must be exactly what the engine preempts when the
lender's pending jobs are scheduled."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from governance.models import Job, JobEvent, JobState
from scheduler import readings
from scheduler.cycle.run import run_cycle
from tests.factories import (
    TeamFactory,
    make_job,
    make_lead,
    make_lending_world,
    make_queue,
    make_share,
)

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"


@pytest.fixture(autouse=True)
def _clock(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


def random_state(rng: random.Random) -> Any:
    """A queue where borrowers run on lenders' idle entitlement, then the lenders' own
    work arrives (submitted, not yet scheduled)."""
    types = [G5, P4][: rng.randint(1, 2)]
    queue = make_queue("q", {t: rng.randint(4, 9) for t in types})
    lead = make_lead(TeamFactory(name="t"), "lead")
    lenders, borrowers = [], []
    for i in range(rng.randint(1, 2)):
        lenders.append(
            make_share(
                queue,
                lead.memberships.first().team,
                f"lender{i}",
                {t: rng.randint(1, 4) for t in types},
                policy=rng.choice(["LEND", "LEND_AND_BORROW"]),
                borrow_limit=0,
            )
        )
    for i in range(rng.randint(1, 3)):
        borrowers.append(
            make_share(
                queue,
                lead.memberships.first().team,
                f"borrower{i}",
                {t: rng.randint(0, 1) for t in types},
                policy="LEND_AND_BORROW",
                borrow_limit=-1,
                in_share_preemption=rng.random() < 0.3,
            )
        )
    earlier = timezone.now() - timedelta(seconds=600)
    for share in borrowers:
        for n in range(rng.randint(1, 4)):
            make_job(
                share,
                lead,
                name=f"{share.name}-{n}",
                priority=rng.randint(0, 50),
                preferences=[{"instance_type": rng.choice(types), "count": rng.randint(1, 3)}],
                duration=10**6,
                checkpoint_interval=rng.choice([None, 60, 300]),
                submitted_at=earlier,
            )
    run_cycle(queue.pk, now=earlier + timedelta(seconds=rng.randint(0, 5)))
    later = timezone.now() - timedelta(seconds=rng.randint(1, 30))
    for share in lenders:
        for n in range(rng.randint(0, 3)):
            make_job(
                share,
                lead,
                name=f"{share.name}-{n}",
                priority=rng.randint(0, 50),
                preferences=[{"instance_type": rng.choice(types), "count": rng.randint(1, 4)}],
                duration=10**6,
                submitted_at=later,
            )
    return queue, lenders, borrowers


@pytest.mark.parametrize("seed", range(30))
def test_would_reclaim_now_is_what_the_engine_preempts(seed: int) -> None:
    rng = random.Random(seed)
    queue, lenders, borrowers = random_state(rng)
    readings_now = {share.pk: readings.lending_now(share) for share in lenders + borrowers}
    predicted = {
        pk: {(r["job"], r["by"]) for r in now["would_reclaim"]} for pk, now in readings_now.items()
    }
    # The borrower's side says the same of each of its runs (runs going now: a job the
    # cycle would start and then reclaim at the same instant has no run to mark yet).
    going = set(
        Job.objects.filter(queue=queue, state=JobState.RUNNING).values_list("pk", flat=True)
    )
    exposed = {
        (run["job"], run["exposure"]["reclaimed_now_by"])
        for now in readings_now.values()
        for run in now["borrowing_runs"]
        if run["exposure"]["reclaimed_now_by"] is not None
    }
    assert exposed == {(job, by) for job, by in set().union(*predicted.values()) if job in going}
    before = set(JobEvent.objects.filter(type="preempted").values_list("pk", flat=True))
    run_cycle(queue.pk, now=timezone.now())
    done: dict[int, set[tuple[int, int]]] = {share.pk: set() for share in lenders + borrowers}
    shares = dict(Job.objects.filter(queue=queue).values_list("pk", "share_id"))
    for event in JobEvent.objects.filter(type="preempted").exclude(pk__in=before):
        if event.data.get("reason") == "reclaim":
            done[shares[event.data["by"]]].add((event.job_id, event.data["by"]))
    assert predicted == done
    RECLAIMS[seed] = sum(len(found) for found in done.values())


RECLAIMS: dict[int, int] = {}


def test_the_random_states_do_reclaim() -> None:
    """Runs after the states above (file order): most of them really reclaimed, so the
    equality above is not between two empty lists."""
    if len(RECLAIMS) < 30:
        pytest.skip("run with the random states above")
    assert sum(1 for n in RECLAIMS.values() if n) >= 10, RECLAIMS


def test_lent_and_borrowed_now_name_the_other_side_and_add_up() -> None:
    w = make_lending_world(8, {"a-lender": 3, "b-lender": 3}, {"x": 4, "y": 3})
    lender_a, lender_b, y = w.a_lender, w.b_lender, w.y
    assert Job.objects.filter(state=JobState.RUNNING).count() == 2
    # Capacity 8, limits 8: nothing unowned. x borrows 3, y borrows 2; in name order x
    # fills a-lender's 3 idle, then y takes 2 of b-lender's.
    a_now = readings.lending_now(lender_a)
    b_now = readings.lending_now(lender_b)
    assert [(r["borrower_name"], r["instances"]) for r in a_now["lent"]] == [("x", 3)]
    assert [(r["borrower_name"], r["instances"]) for r in b_now["lent"]] == [("y", 2)]
    (run,) = a_now["lent"][0]["runs"]
    assert run["name"] == "x-run" and run["count"] == 4 and run["since"] is not None
    assert run["exposure"]["open_to_reclaim"] == 2
    y_now = readings.lending_now(y)
    assert [(r["lender_name"], r["source"], r["instances"]) for r in y_now["borrowed"]] == [
        ("b-lender", "lender", 2)
    ]
    assert [r["name"] for r in y_now["borrowing_runs"]] == ["y-run"]
    assert a_now["would_reclaim"] == []
