"""The same usage figures come out of the API, the pages and the engine (one accounting
function, ``scheduler.engine.accounting``), on the demo's queues with work running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from governance import demo
from governance.demo import activity as demo_activity
from governance.models import JobQueue
from governance.selectors import scheduling
from governance.web.presenters import overview as web_overview
from scheduler.cycle.run import run_cycle

pytestmark = pytest.mark.django_db

FIGURES = ("limit", "usage", "own", "borrowed")


@pytest.fixture
def busy_demo(tmp_path: Path) -> list[JobQueue]:
    demo.load(tmp_path)
    queues = list(JobQueue.objects.order_by("name"))
    for tick in range(6):  # work arrives, capacity drops, the worked example borrows
        demo_activity.tick(tick)
        for queue in queues:
            run_cycle(queue.pk)
    return queues


def test_api_pages_and_engine_agree_on_the_demo(busy_demo: list[JobQueue]) -> None:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="reviewer"))
    blocks = {b.queue_id: b for b in web_overview.usage_blocks(busy_demo)}
    running = 0
    for queue in busy_demo:
        api = client.get(f"/api/queues/{queue.pk}/usage/").json()
        from_api: dict[tuple[str, str], dict[str, Any]] = {
            (share["name"], row["instance_type"]): row
            for share in api["shares"]
            for row in share["types"]
        }
        from_engine = {
            (row["share_name"], row["instance_type"]): row
            for row in scheduling.engine_usage(queue.pk)
        }
        from_pages = {
            (bar.name, block.instance_type): bar
            for block in blocks[queue.pk].types
            for bar in block.shares
        }
        assert from_api, queue.name
        for key, row in from_api.items():
            engine_row = from_engine[key]
            assert {f: row[f] for f in FIGURES} == {f: engine_row[f] for f in FIGURES}, key
            assert row["idle"] == engine_row["idle"], key
            bar = from_pages[key]
            assert {f: getattr(bar, f) for f in FIGURES} == {f: row[f] for f in FIGURES}, key
            assert bar.lent == row["lent"], key
            running += row["usage"]
        # What the API leaves out, the engine counts as nothing: no limit and no use.
        for key, engine_row in from_engine.items():
            if key not in from_api:
                assert (engine_row["limit"], engine_row["usage"]) == (0, 0), key
    assert running > 0  # the comparison was made on a queue at work
