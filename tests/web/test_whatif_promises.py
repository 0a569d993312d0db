"""What-if against the agreements' promises, from the two baselines
(docs/agreements.md#what-if-against-promises), on the recorded history of
``tests/services/test_history.py``: beta borrows and alpha reclaims from it twice."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from governance.models import WhatIf
from governance.services import agreements as agreement_services
from governance.services import promises as promise_services
from governance.services import whatif as whatif_services
from scheduler import tasks
from tests.services.test_history import at, clock, run_history, world  # noqa: F401
from tests.web.test_whatif import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def recorded(world: Any, clock: Any) -> Any:  # noqa: F811
    run_history(world, clock)
    clock.now = at(400)
    world.agreement = agreement_services.agreement_create(
        actor=world.admin,
        title="Beta borrows what alpha lends",
        shares=[world.alpha.pk, world.beta.pk],
        promises=[
            {
                "figure": "preemptions_suffered.reclaim",
                "share": world.beta.pk,
                "comparison": "<=",
                "threshold": 0,
                "window_days": 1,
            },
            {
                "figure": "jobs_finished.total",
                "team": world.alpha.team_id,
                "comparison": ">=",
                "threshold": 1,
                "window_days": 1,
            },
        ],
    )
    promise_services.promises_evaluate(stop=at(400))
    world.client = Client()
    world.client.force_login(world.admin)
    return world


def test_strict_partitions_keep_the_promise_the_pool_broke(recorded: Any) -> None:
    reclaim = recorded.agreement.promises.get(figure="preemptions_suffered.reclaim")
    assert (reclaim.state, reclaim.value) == ("broken", 2.0)  # b1 reclaimed at 10 s and 70 s
    client = recorded.client
    form = client.get(f"/queues/{recorded.queue.pk}/whatif/?baseline=strict_partitions")
    page = form.content.decode()
    assert '<input type="hidden" name="baseline" value="strict_partitions">' in page
    assert '<option value="RESERVE" selected>' in page
    data = form_data(recorded, baseline="strict_partitions")
    for share in (recorded.alpha, recorded.beta):
        data[f"share-{share.pk}-policy"] = "RESERVE"
    response = client.post(f"/queues/{recorded.queue.pk}/whatif/", data)
    assert response.status_code == 302, response.content.decode()
    run = WhatIf.objects.get()
    assert run.proposal["baseline"] == "strict_partitions"
    assert run.proposal["shares"]["alpha"]["policy"] == "RESERVE"
    assert run.proposal["shares"]["beta"]["policy"] == "RESERVE"

    tasks.run_whatif(run.pk)

    run.refresh_from_db()
    judged = {p["figure"]: p for p in run.result["promises"]}
    assert judged["preemptions_suffered.reclaim"]["baseline"] == {"value": 2.0, "state": "broken"}
    assert judged["preemptions_suffered.reclaim"]["proposed"] == {"value": 0.0, "state": "kept"}
    assert judged["jobs_finished.total"]["group_by"] == "team"
    result = client.get(f"/whatif/{run.pk}/").content.decode()
    assert "Promises of the agreements" in result
    assert (
        "promise “preemptions_suffered.reclaim &lt;= 0” would be kept instead of broken" in result
    )
    assert "Share alpha: " in result and "Share beta: " in result


def test_the_pooled_baseline_lays_custom_edits_over_it(recorded: Any) -> None:
    clean = whatif_services.clean_proposal(
        recorded.queue,
        {"baseline": "pooled", "shares": {"alpha": {"borrow_limit": 50}}},
    )
    assert clean["shares"] == {
        "alpha": {"policy": "LEND_AND_BORROW", "borrow_limit": 50},
        "beta": {"policy": "LEND_AND_BORROW", "borrow_limit": -1},
    }
    assert clean["baseline"] == "pooled"


def test_an_unknown_baseline_is_a_400_naming_it(recorded: Any) -> None:
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(recorded.admin)
    response = api.post(
        f"/api/queues/{recorded.queue.pk}/whatif/",
        {"from": "2025-03-03T07:59:59Z", "to": "2025-03-03T08:06:40Z", "baseline": "shared"},
        format="json",
    )
    assert response.status_code == 400
    assert "baseline" in response.json()
