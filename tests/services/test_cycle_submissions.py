"""A submission does not wait for its queue's running cycle.

The cycle locks its queue's row so that one cycle per queue runs at a time. A new job
references the queue (a foreign key), and PostgreSQL checks such a reference with a
key-share lock: a cycle holding ``FOR UPDATE`` made every submission to the queue wait
until the cycle committed; ``FOR NO KEY UPDATE`` still keeps cycles one at a time and
lets submissions through. Real connections, real commits.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import OperationalError, connection, connections, transaction

from governance.models import Job
from governance.services import hooks
from governance.services import jobs as jobs_svc
from scheduler.cycle.run import run_cycle
from scheduler.executors.base import BaseExecutor
from tests.factories import TeamFactory, make_lead, make_queue, make_share

pytestmark = pytest.mark.django_db(transaction=True)

G5 = "ml.g5.xlarge"
ONE_G5 = [{"instance_type": G5, "count": 1}]


@pytest.fixture(autouse=True)
def _no_triggers(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test runs the cycle itself: no request may reach a worker.
    monkeypatch.setattr(hooks.cycle_wanted, "receivers", [])


def _hold_a_cycle(queue_id: int, holding: threading.Event, release: threading.Event) -> None:
    """Run a cycle of the queue and stay inside its transaction (its locks held) until
    ``release``."""

    class Holding(BaseExecutor):
        def within_cycle(self, *_: Any) -> None:
            holding.set()
            release.wait(timeout=60)

    try:
        run_cycle(queue_id, executor=Holding())
    finally:
        connections.close_all()


def _try(action: Any, outcome: list[Any]) -> None:
    """Run ``action`` in a transaction that gives up on any lock it would wait for."""
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            outcome.append(action())
    except OperationalError as exc:
        outcome.append(exc)
    finally:
        connections.close_all()


def test_a_submission_commits_while_its_queue_is_in_a_cycle_and_a_second_cycle_waits() -> None:
    queue = make_queue("busy", {G5: 2})
    team = TeamFactory(name="busy-team")
    share = make_share(queue, team, limits={G5: 2})
    lead = make_lead(team)
    holding, release = threading.Event(), threading.Event()
    cycle = threading.Thread(target=_hold_a_cycle, args=(queue.pk, holding, release))
    cycle.start()
    submitted: list[Any] = []
    second_cycle: list[Any] = []
    try:
        assert holding.wait(timeout=60)
        for action, outcome in (
            (
                lambda: jobs_svc.job_submit(
                    actor=lead, share=share.pk, name="during", preferences=ONE_G5
                ),
                submitted,
            ),
            (lambda: run_cycle(queue.pk), second_cycle),
        ):
            other = threading.Thread(target=_try, args=(action, outcome))
            other.start()
            other.join()
    finally:
        release.set()
        cycle.join()
    # Committed, not refused at commit (where the deferred foreign key check runs).
    assert [type(x) for x in submitted] == [Job], submitted
    assert Job.objects.filter(pk=submitted[0].pk, name="during").exists()
    # Cycles of one queue still run one at a time: the second gave up waiting.
    assert isinstance(second_cycle[0], OperationalError) and "lock timeout" in str(second_cycle[0])
