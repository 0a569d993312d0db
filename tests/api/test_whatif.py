"""``/api/queues/{id}/whatif/``: a what-if requested, run by the task (as a worker runs
it), read back with both sides' signals, and attached to an agreement as evidence."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, WhatIf
from governance.services import agreements as agreement_services
from scheduler import tasks
from tests.factories import make_member, make_reviewer
from tests.services.test_history import G5, at, clock, run_history, world  # noqa: F401

pytestmark = pytest.mark.django_db

WINDOW = {"from": "2025-03-03T07:59:59Z", "to": "2025-03-03T08:06:40Z"}


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def ran(world: Any, clock: Any) -> Any:  # noqa: F811
    run_history(world, clock)
    clock.now = at(400)
    return world


def request_whatif(client: APIClient, queue_id: int, **proposal: Any) -> Any:
    return client.post(f"/api/queues/{queue_id}/whatif/", {**WINDOW, **proposal}, format="json")


def test_a_whatif_runs_and_reads_back_side_by_side(ran: Any) -> None:
    admin = api(ran.admin)
    response = request_whatif(
        admin, ran.queue.pk, shares={"beta": {"borrow_limit": 0}}, capacity={G5: 3}
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["state"] == "QUEUED" and body["progress"] == 0
    assert body["proposal"] == {"shares": {"beta": {"borrow_limit": 0}}, "capacity": {G5: 3}}
    assert AuditEntry.objects.filter(event_type=AuditEvent.WHATIF_REQUESTED).count() == 1

    tasks.run_whatif(body["id"])  # what the worker does

    done = admin.get(f"/api/queues/{ran.queue.pk}/whatif/{body['id']}/").json()
    assert done["state"] == "DONE" and done["progress"] == 100
    result = done["result"]
    base = {g["share"]: g for g in result["baseline"]["groups"]}
    new = {g["share"]: g for g in result["proposed"]["groups"]}
    # as it was, beta borrowed (b1 and b2 ran beyond its limit); with no borrowing it cannot
    assert sum(v["borrowed"] for v in base["beta"]["instance_seconds"].values()) > 0
    assert sum(v["borrowed"] for v in new["beta"]["instance_seconds"].values()) == 0
    assert base["alpha"]["preemptions_caused"]["reclaim"] == 2
    assert new["alpha"]["preemptions_caused"]["reclaim"] == 0  # nothing borrowed to reclaim
    diff = result["differences"]["beta"]
    assert diff["preemptions"] == (
        new["beta"]["preemptions_suffered"]["total"] - base["beta"]["preemptions_suffered"]["total"]
    )
    listing = admin.get(f"/api/queues/{ran.queue.pk}/whatif/").json()["results"]
    assert [r["id"] for r in listing] == [body["id"]] and "result" not in listing[0]


@pytest.mark.parametrize(
    ("proposal", "field"),
    [
        ({"shares": {"nobody": {"policy": "LEND"}}}, "shares.nobody"),
        ({"shares": {"beta": {"limits": {"ml.unknown": 1}}}}, "shares.beta.limits"),
        ({"shares": {"beta": {"enabled": False}}}, "shares.beta.enabled"),
        ({"shares": {"beta": {"policy": "EVERYTHING"}}}, "shares.beta.policy"),
        ({"capacity": {G5: -2}}, f"capacity.{G5}"),
        ({"capacity": {"ml.unknown": 2}}, "capacity.ml.unknown"),
        ({}, "proposal"),
    ],
)
def test_invalid_proposals_name_the_field(ran: Any, proposal: dict, field: str) -> None:
    response = request_whatif(api(ran.admin), ran.queue.pk, **proposal)
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_bad_windows_and_who_may_ask(ran: Any) -> None:
    admin = api(ran.admin)
    bad = admin.post(
        f"/api/queues/{ran.queue.pk}/whatif/",
        {"from": "2025-03-04", "to": "2025-03-03", "capacity": {G5: 1}},
        format="json",
    )
    assert bad.status_code == 400 and "to" in bad.json()
    member = make_member(ran.alpha.team, "red_member")
    denied = request_whatif(api(member), ran.queue.pk, capacity={G5: 1})
    assert denied.status_code == 403
    assert request_whatif(api(ran.red_lead), ran.queue.pk, capacity={G5: 1}).status_code == 202
    # reviewers judge agreements against outcomes: they compare configurations too
    reviewer = make_reviewer("rev")
    assert request_whatif(api(reviewer), ran.queue.pk, capacity={G5: 1}).status_code == 202
    assert request_whatif(admin, 999999, capacity={G5: 1}).status_code == 404


def test_attach_a_finished_whatif_to_an_agreement(ran: Any) -> None:
    admin = api(ran.admin)
    run_id = request_whatif(admin, ran.queue.pk, capacity={G5: 4}).json()["id"]
    agreement = agreement_services.agreement_create(
        actor=ran.admin, title="GPU split", shares=[ran.alpha.pk]
    )
    url = f"/api/queues/{ran.queue.pk}/whatif/{run_id}/attach/"
    early = admin.post(url, {"agreement": agreement.pk}, format="json")
    assert early.status_code == 400 and "whatif" in early.json()
    tasks.run_whatif(run_id)
    assert (
        api(ran.blue_lead).post(url, {"agreement": agreement.pk}, format="json").status_code == 403
    )
    missing = admin.post(url, {"agreement": 999999}, format="json")
    assert missing.status_code == 400 and "agreement" in missing.json()
    attached = admin.post(url, {"agreement": agreement.pk}, format="json")
    assert attached.status_code == 200
    assert attached.json()["agreement"] == agreement.pk
    assert WhatIf.objects.get(pk=run_id).agreement_id == agreement.pk
    entry = AuditEntry.objects.get(event_type=AuditEvent.WHATIF_ATTACHED)
    assert entry.after == {"agreement": agreement.pk, "whatif": run_id, "queue": ran.queue.pk}


def test_a_lead_cannot_move_another_teams_evidence_and_the_owner_hears_of_a_move(
    ran: Any,
) -> None:
    """Blue's lead tries to take red's what-if evidence onto blue's own agreement."""
    from django.test import Client

    from governance.models import Notification, NotificationKind

    red_run = request_whatif(api(ran.red_lead), ran.queue.pk, capacity={G5: 4}).json()["id"]
    tasks.run_whatif(red_run)
    red_agreement = agreement_services.agreement_create(
        actor=ran.admin, title="Red's case", owner=ran.red_lead.username, shares=[ran.alpha.pk]
    )
    blue_agreement = agreement_services.agreement_create(
        actor=ran.admin, title="Blue's case", owner=ran.blue_lead.username, shares=[ran.beta.pk]
    )
    url = f"/api/queues/{ran.queue.pk}/whatif/{red_run}/attach/"
    assert (
        api(ran.red_lead).post(url, {"agreement": red_agreement.pk}, format="json").status_code
        == 200
    )
    stolen = api(ran.blue_lead).post(url, {"agreement": blue_agreement.pk}, format="json")
    assert stolen.status_code == 403
    assert "Red's case" in stolen.json()["agreement"][0]
    assert WhatIf.objects.get(pk=red_run).agreement_id == red_agreement.pk
    assert AuditEntry.objects.filter(event_type=AuditEvent.WHATIF_ATTACHED).count() == 1
    # red's agreement page lists it, with a link to the result
    page = Client()
    page.force_login(ran.blue_lead)
    body = page.get(f"/agreements/{red_agreement.pk}/").content.decode()
    assert f'href="/whatif/{red_run}/"' in body
    assert (
        f'href="/whatif/{red_run}/"'
        not in page.get(f"/agreements/{blue_agreement.pk}/").content.decode()
    )
    # an admin may move it; red's lead, the owner it left, is told
    assert (
        api(ran.admin).post(url, {"agreement": blue_agreement.pk}, format="json").status_code == 200
    )
    [told] = Notification.objects.filter(kind=NotificationKind.AGREEMENT_EVIDENCE_MOVED)
    assert told.recipient_id == ran.red_lead.pk
    assert "Blue's case" in told.title and told.url == f"/agreements/{red_agreement.pk}/"
    assert (
        f'href="/whatif/{red_run}/"'
        in page.get(f"/agreements/{blue_agreement.pk}/").content.decode()
    )


def test_what_ifs_are_capped_per_person_with_a_clear_429(ran: Any, settings: Any) -> None:
    """A lead floods the workers with replays: past the cap each request is refused."""
    settings.WHATIF_MAX_PER_USER = 2
    lead = api(ran.red_lead)
    first, second = (
        request_whatif(lead, ran.queue.pk, capacity={G5: n}).json()["id"] for n in (3, 4)
    )
    refused = request_whatif(lead, ran.queue.pk, capacity={G5: 5})
    assert refused.status_code == 429
    assert "at most 2 at once" in refused.json()["detail"][0]
    assert WhatIf.objects.filter(requested_by=ran.red_lead).count() == 2
    # someone else is not held up by red's lead
    assert request_whatif(api(ran.blue_lead), ran.queue.pk, capacity={G5: 5}).status_code == 202
    tasks.run_whatif(first)  # one finishes: room for one more
    assert request_whatif(lead, ran.queue.pk, capacity={G5: 5}).status_code == 202
    assert WhatIf.objects.get(pk=second).state == "QUEUED"


def test_what_ifs_go_to_their_own_queue_never_the_scheduling_one(
    ran: Any, settings: Any, django_capture_on_commit_callbacks: Any, tmp_path: Any
) -> None:
    """The message of a requested replay waits in the what-if queue, which only the
    what-if worker reads; the scheduling workers read the default queue alone."""
    from governance.celery import app
    from scripts.devserver import program_commands

    with app.connection_for_write() as conn:
        redis = conn.default_channel.client
        before = {q: redis.llen(q) for q in ("celery", settings.WHATIF_QUEUE)}
        with django_capture_on_commit_callbacks(execute=True):
            run_id = request_whatif(api(ran.admin), ran.queue.pk, capacity={G5: 3}).json()["id"]
        after = {q: redis.llen(q) for q in ("celery", settings.WHATIF_QUEUE)}
        assert after[settings.WHATIF_QUEUE] == before[settings.WHATIF_QUEUE] + 1
        assert after["celery"] == before["celery"]
        redis.delete(settings.WHATIF_QUEUE)
    assert WhatIf.objects.get(pk=run_id).state == "QUEUED"
    routed = app.amqp.router.route({}, "scheduler.tasks.schedule_queue")
    assert routed["queue"].name == "celery"
    commands = program_commands(tmp_path, {})
    worker, replayer = commands["worker"], commands["whatif"]
    assert worker[worker.index("--queues") + 1] == "celery"
    assert replayer[replayer.index("--queues") + 1] == settings.WHATIF_QUEUE
