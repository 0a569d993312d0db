"""What-if pages: the form like the share editor, the run's page with its progress and
then both sides side by side, and attaching it to an agreement."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from governance.models import AuditEntry, AuditEvent, WhatIf
from governance.services import agreements as agreement_services
from governance.services.shares import limits_map
from scheduler import tasks
from tests.services.test_history import G5, at, clock, run_history, world  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_page(world: Any, clock: Any) -> Client:  # noqa: F811
    run_history(world, clock)
    clock.now = at(400)
    client = Client()
    client.force_login(world.admin)
    return client


def form_data(world: Any, **changes: str) -> dict[str, str]:  # noqa: F811
    data = {"from": "2025-03-03T07:59:59Z", "to": "2025-03-03T08:06:40Z"}
    data[f"capacity-{G5}"] = "3"
    data["capacity-ml.p4d.24xlarge"] = "1"
    for share in (world.alpha, world.beta):
        share.refresh_from_db()
        prefix = f"share-{share.pk}-"
        data[prefix + "policy"] = share.policy
        data[prefix + "borrow_limit"] = (
            "" if share.borrow_limit is None else str(share.borrow_limit)
        )
        data[prefix + "preemption_retries"] = (
            "" if share.preemption_retries is None else str(share.preemption_retries)
        )
        if share.in_share_preemption:
            data[prefix + "in_share_preemption"] = "on"
        for name, value in limits_map(share).items():
            data[f"{prefix}limit-{name}"] = str(value)
    data.update(changes)
    return data


def test_run_a_whatif_from_the_form_and_attach_it(admin_page: Client, world: Any) -> None:  # noqa: F811
    form = admin_page.get(f"/queues/{world.queue.pk}/whatif/").content.decode()
    assert f'name="share-{world.beta.pk}-borrow_limit" value="-1"' in form
    alpha = world.alpha
    alpha.refresh_from_db()
    unchanged = admin_page.post(f"/queues/{world.queue.pk}/whatif/", form_data(world))
    assert unchanged.status_code == 400  # nothing changed: nothing to compare
    response = admin_page.post(
        f"/queues/{world.queue.pk}/whatif/",
        form_data(world, **{f"share-{world.beta.pk}-borrow_limit": "0"}),
    )
    assert response.status_code == 302
    run = WhatIf.objects.get()
    assert run.proposal == {"shares": {"beta": {"borrow_limit": 0}}, "capacity": {}}
    waiting = admin_page.get(response["Location"]).content.decode()
    assert "Queued" in waiting and 'hx-trigger="every 1s"' in waiting

    tasks.run_whatif(run.pk)

    page = admin_page.get(f"/whatif/{run.pk}/").content.decode()
    assert "As it was" in page and "Proposed" in page
    assert "Borrowed instance-hours" in page and 'hx-trigger="every 1s"' not in page
    # The result leads with a sentence per share of what changes, before the tables.
    summary = page.index("What changes, for whom")
    assert summary < page.index("As it was")
    assert page.index("Share beta:") > summary and page.index("The whole queue:") > summary
    assert "borrow limit 0 %" in page  # the proposal in words, not borrow_limit = 0
    assert "100 % ·" not in page  # a finished run shows no progress figure
    agreement = agreement_services.agreement_create(actor=world.admin, title="Split of hist")
    attached = admin_page.post(
        f"/whatif/{run.pk}/attach/", {"agreement": agreement.pk}, follow=True
    )
    assert "Attached to the agreement as evidence." in attached.content.decode()
    assert "Split of hist" in attached.content.decode()
    assert AuditEntry.objects.filter(event_type=AuditEvent.WHATIF_ATTACHED).exists()


def test_the_form_says_what_is_wrong(admin_page: Client, world: Any) -> None:  # noqa: F811
    response = admin_page.post(
        f"/queues/{world.queue.pk}/whatif/",
        form_data(world, **{f"share-{world.beta.pk}-limit-{G5}": "lots", f"capacity-{G5}": "-3"}),
    )
    assert response.status_code == 400
    html = response.content.decode()
    # Each message beside its field, in words (no "shares.beta.limits" key), and what
    # was typed kept.
    assert "shares.beta" not in html and f"capacity.{G5}" not in html
    assert "the limit must be" in html and "A whole number from 0 to" in html
    assert 'value="lots"' in html and 'value="-3"' in html
    assert not WhatIf.objects.exists()


def test_past_the_per_person_cap_the_form_says_to_wait(
    admin_page: Client,
    world: Any,  # noqa: F811
    settings: Any,
) -> None:
    settings.WHATIF_MAX_PER_USER = 1
    url = f"/queues/{world.queue.pk}/whatif/"
    change = {f"share-{world.beta.pk}-borrow_limit": "0"}
    assert admin_page.post(url, form_data(world, **change)).status_code == 302
    refused = admin_page.post(url, form_data(world, **change))
    assert refused.status_code == 429
    assert "wait for one to finish" in refused.content.decode()
    assert WhatIf.objects.count() == 1


def test_the_form_reports_every_problem_at_once(admin_page: Client, world: Any) -> None:  # noqa: F811
    """A wrong window no longer hides the proposal's problems until the next round."""
    response = admin_page.post(
        f"/queues/{world.queue.pk}/whatif/",
        form_data(
            world,
            **{"from": "yesterday", f"share-{world.beta.pk}-limit-{G5}": "lots"},
            **{f"capacity-{G5}": "-3"},
        ),
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "is not an ISO 8601 date" in html
    assert "the limit must be" in html and "A whole number from 0 to" in html


def test_the_form_offers_borrowing_only_for_verified_recovery(
    admin_page: Client,
    world: Any,  # noqa: F811
) -> None:
    field = f"share-{world.beta.pk}-borrow_requires_verified_recovery"
    assert f'name="{field}"' in admin_page.get(f"/queues/{world.queue.pk}/whatif/").content.decode()
    response = admin_page.post(
        f"/queues/{world.queue.pk}/whatif/", form_data(world, **{field: "on"})
    )
    assert response.status_code == 302
    run = WhatIf.objects.get()
    assert run.proposal["shares"] == {"beta": {"borrow_requires_verified_recovery": True}}
    tasks.run_whatif(run.pk)
    run.refresh_from_db()
    assert run.state == "DONE", run.error
    page = admin_page.get(f"/whatif/{run.pk}/").content.decode()
    assert "borrowing requires verified recovery on" in page
