"""Share page and the admins' share editor: preview, save through the service, conflicts."""

from __future__ import annotations

from typing import Any

import pytest

from governance.models import AuditEntry, AuditEvent, InstanceType, Share
from governance.services import limits
from governance.services import shares as share_services
from scheduler.cycle.run import run_cycle
from tests.factories import make_admin
from tests.web.test_overview import (
    aws_world,
    borrowing_then_reclaim,
    client_for,
    count_queries,
    submit,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return aws_world()


def form_data(share: Share, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "version": share.version,
        "policy": share.policy,
        "borrow_limit": "" if share.borrow_limit is None else share.borrow_limit,
        "preemption_retries": "" if share.preemption_retries is None else share.preemption_retries,
        "limit_type_0": "ml.g5.xlarge",
        "limit_count_0": 1,
        "enabled": "on",
        "reason": "Q1 review",
    }
    if share.in_share_preemption:
        data["in_share_preemption"] = "on"
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize("role", ["admin", "reviewer", "lead_vision", "member_vision"])
def test_share_page_for_every_role(world, role):
    response = client_for(getattr(world, role)).get(f"/shares/{world.background.pk}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Lend and borrow" in body and "200% of each limit on top" in body
    assert (f"/shares/{world.background.pk}/edit/" in body) == (role == "admin")


@pytest.mark.parametrize("role", ["reviewer", "lead_vision", "member_vision"])
def test_only_admins_edit(world, role):
    client = client_for(getattr(world, role))
    url = f"/shares/{world.background.pk}/"
    assert client.get(url + "edit/").status_code == 403
    assert client.post(url + "edit/", form_data(world.background)).status_code == 403
    assert client.post(url + "preview/", form_data(world.background)).status_code == 403
    world.background.refresh_from_db()
    assert world.background.version == 1


def test_editor_shows_current_values_and_live_preview_wiring(world):
    response = client_for(world.admin).get(f"/shares/{world.background.pk}/edit/")
    body = response.content.decode()
    assert response.status_code == 200
    assert f'hx-post="/shares/{world.background.pk}/preview/"' in body
    assert 'hx-trigger="change, keyup changed delay:400ms"' in body
    assert 'name="version" value="1"' in body
    assert 'value="200"' in body  # borrow limit shown and enabled for LEND_AND_BORROW
    medium = client_for(world.admin).get(f"/shares/{world.medium.pk}/edit/").content.decode()
    # Another policy: shown empty and never disabled by the server (the script disables
    # it while another policy is chosen; without it the admin can still type one).
    assert 'id="id_borrow_limit" value="" data-only-for-policy="LEND_AND_BORROW"' in medium


def test_save_goes_through_the_service_with_reason_and_version(world):
    response = client_for(world.admin).post(
        f"/shares/{world.background.pk}/edit/",
        form_data(world.background, limit_count_0=2, borrow_limit=100, reason="More for vision"),
    )
    assert response.status_code == 302
    share = Share.objects.get(pk=world.background.pk)
    assert share.version == 2 and share.borrow_limit == 100
    entry = AuditEntry.objects.get(event_type=AuditEvent.SHARE_UPDATED, share_id=share.pk)
    assert entry.actor == world.admin and entry.reason == "More for vision"
    assert entry.after["limits"] == {"ml.g5.xlarge": 2}


def test_the_cached_editor_shows_a_saved_change_on_the_next_view(world):
    """The editor as first shown is cached per state: after a save it shows the new
    version and values (the title too), and an unknown share is a 404."""
    client = client_for(world.admin)
    url = f"/shares/{world.background.pk}/edit/"
    first = client.get(url).content.decode()
    assert 'name="version" value="1"' in first and 'value="200"' in first
    assert client.get(url).content.decode().count('name="version" value="1"') == 1
    client.post(url, form_data(world.background, borrow_limit=150, reason="Less borrowing"))
    after = client.get(url).content.decode()
    assert 'name="version" value="2"' in after and 'value="150"' in after
    assert f"<title>Edit {world.background.name}" in after
    assert client.get("/shares/999999/edit/").status_code == 404


def test_reason_is_required(world):
    response = client_for(world.admin).post(
        f"/shares/{world.background.pk}/edit/", form_data(world.background, reason="")
    )
    assert response.status_code == 400
    assert "Say why you change this share" in response.content.decode()
    assert Share.objects.get(pk=world.background.pk).version == 1


def test_service_errors_are_shown_beside_their_fields(world):
    response = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/edit/",
        form_data(world.medium, preemption_retries=limits.MAX_RETRIES + 1),
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert "Must be empty (unlimited)" in form.errors["preemption_retries"][0]
    assert Share.objects.get(pk=world.medium.pk).version == 1
    assert not AuditEntry.objects.filter(event_type=AuditEvent.SHARE_UPDATED).exists()


def test_a_borrow_limit_left_on_another_policy_is_cleared_not_refused(world):
    """Issue 13: the borrow limit came back disabled with its old value after leaving
    LEND_AND_BORROW, refused by the service, and the admin could not clear it."""
    response = client_for(world.admin).post(
        f"/shares/{world.background.pk}/edit/",
        form_data(world.background, policy="RESERVE", borrow_limit=200),
    )
    assert response.status_code == 302, response.context["form"].errors
    share = Share.objects.get(pk=world.background.pk)
    assert share.policy == "RESERVE" and share.borrow_limit is None
    page = client_for(world.admin).get(f"/shares/{share.pk}/edit/").content.decode()
    assert (
        'id="id_borrow_limit" value=""' in page
        and "disabled" not in page.split('id="id_borrow_limit"')[1].split(">")[0]
    )
    # Back to LEND_AND_BORROW with a new value: it is taken.
    response = client_for(world.admin).post(
        f"/shares/{share.pk}/edit/",
        form_data(share, policy="LEND_AND_BORROW", borrow_limit=50),
    )
    assert response.status_code == 302
    assert Share.objects.get(pk=share.pk).borrow_limit == 50


def test_a_negative_limit_gets_one_message(world):
    response = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/edit/", form_data(world.medium, limit_count_0=-3)
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert form.errors["limit_count_0"] == [
        "A limit is a count of 0 or more (0 makes the type borrow-only); leave the row "
        "empty to drop the type."
    ]
    assert "limit_type_0" not in form.errors and "limits" not in form.errors
    body = response.content.decode()
    assert "Give a count" not in body


def test_the_editor_reports_every_problem_at_once(world):
    """A negative limit (the form's rule), no reason (the form's) and too many retries
    (the service's): all three in the first answer, and nothing stored or audited."""
    response = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/edit/",
        form_data(
            world.medium,
            limit_count_0=-3,
            reason="",
            preemption_retries=limits.MAX_RETRIES + 1,
        ),
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert "A limit is a count of 0 or more" in form.errors["limit_count_0"][0]
    assert "Say why you change this share" in " ".join(form.errors["reason"])
    assert "Must be empty (unlimited)" in form.errors["preemption_retries"][0]
    assert Share.objects.get(pk=world.medium.pk).version == 1
    assert not AuditEntry.objects.filter(event_type=AuditEvent.SHARE_UPDATED).exists()


def test_a_sixth_limit_is_refused_not_dropped(world):
    for name in ("t.a", "t.b", "t.c", "t.d", "t.e"):
        itype = InstanceType.objects.create(name=name)
        world.queue.capacities.create(instance_type=itype, count=4)
    page = client_for(world.admin).get(f"/shares/{world.medium.pk}/edit/").content.decode()
    # As many rows as the legend promises ("up to 5"), not a sixth one to fill.
    assert 'name="limit_type_4"' in page and 'name="limit_type_5"' not in page
    assert "up to 5 instance types" in page
    rows = {"limit_type_0": "ml.g5.xlarge", "limit_count_0": 1}
    for i, name in enumerate(("t.a", "t.b", "t.c", "t.d", "t.e"), start=1):
        rows |= {f"limit_type_{i}": name, f"limit_count_{i}": 1}
    response = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/edit/", form_data(world.medium, **rows)
    )
    assert response.status_code == 400
    assert "at most 5 limits; 6 given" in response.context["form"].errors["limits"][0]
    assert Share.objects.get(pk=world.medium.pk).version == 1
    # A row beyond those shown (a hand-made post) is refused too, not dropped.
    response = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/edit/",
        form_data(world.medium, limit_type_9="t.a", limit_count_9=1),
    )
    assert response.status_code == 400
    assert "at most 5 limits" in response.context["form"].errors["limits"][0]


def test_duplicate_limit_rows_are_refused_by_name(world):
    response = client_for(world.admin).post(
        f"/shares/{world.medium.pk}/edit/",
        form_data(world.medium, limit_type_1="ml.g5.xlarge", limit_count_1=1),
    )
    assert response.status_code == 400
    assert "already listed above" in response.context["form"].errors["limit_type_1"][0]


def test_stale_edit_shows_the_other_change(world):
    other_admin = make_admin("other-admin")
    share_services.share_update(
        actor=other_admin,
        share=world.background,
        version=1,
        changes={"limits": {"ml.g5.xlarge": 2}},
        reason="Release week",
    )
    response = client_for(world.admin).post(
        f"/shares/{world.background.pk}/edit/", form_data(world.background, borrow_limit=50)
    )
    assert response.status_code == 409
    body = response.content.decode()
    assert "Someone else changed this share" in body
    assert "other-admin" in body and "Release week" in body
    assert "2 \u00d7 ml.g5.xlarge" in body and "1 \u00d7 ml.g5.xlarge" in body  # current vs yours
    assert "Reload with the current values" in body
    assert 'name="version" value="2"' in body  # saving again replaces version 2 knowingly
    share = Share.objects.get(pk=world.background.pk)
    assert share.version == 2 and share.borrow_limit == 200


def test_preview_lists_what_the_change_would_do(world):
    borrowing_then_reclaim(world)  # bg-high runs own, llm-pretrain reclaimed bg-med
    response = client_for(world.admin).post(
        f"/shares/{world.background.pk}/preview/",
        form_data(world.background, limit_count_0=0, borrow_limit=-1, reason=""),
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="preview"' in body and "<html" not in body
    assert "<del>1 \u00d7 ml.g5.xlarge</del> <ins>0 \u00d7 ml.g5.xlarge</ins>" in body
    # bg-high would sit beyond the new limit of 0: open to reclaim.
    assert "Would become borrowed capacity" in body
    assert '<a href="/jobs/' in body and "bg-high</a>" in body and "open to reclaim" in body


def test_preview_shows_field_errors_for_invalid_input(world):
    response = client_for(world.admin).post(
        f"/shares/{world.background.pk}/preview/",
        form_data(world.background, limit_count_0="-3", preemption_retries="x"),
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "The proposed values are not valid" in body
    assert Share.objects.get(pk=world.background.pk).version == 1


def test_share_page_query_count_is_constant(world):
    client = client_for(world.reviewer)
    url = f"/shares/{world.background.pk}/"
    small = count_queries(client, url)
    for i in range(15):
        submit(world.lead_vision, world.background, f"extra-{i}", 1)
    run_cycle(world.queue.pk)
    share_services.share_update(
        actor=world.admin,
        share=world.background,
        version=1,
        changes={"borrow_limit": 100},
        reason="x",
    )
    assert count_queries(client, url) == small


def test_cached_jobs_table_shows_a_change_on_the_next_view(world):
    """The share's jobs table is cached under its queue's state: served from the cache
    it reads as rendered afresh (fewer queries), and a new job shows on the next view."""
    from django.core.cache import caches

    client = client_for(world.reviewer)
    url = f"/shares/{world.background.pk}/"
    submit(world.lead_vision, world.background, "first", 1)

    def table() -> str:
        body = client.get(url).content.decode()
        return body[body.index("<h2>Running and pending jobs") : body.index("Recent changes")]

    fresh = table()
    assert "first" in fresh and "(1)" in fresh and "<!--when-->" not in fresh
    warm = count_queries(client, url)
    assert table() == fresh
    caches["shared"].clear()
    assert count_queries(client, url) > warm
    submit(world.lead_vision, world.background, "second", 1)
    after = table()
    assert "second" in after and "(2)" in after


def test_the_editor_sets_borrowing_requires_verified_recovery(world):
    url = f"/shares/{world.background.pk}/"
    editor = client_for(world.admin).get(url + "edit/").content.decode()
    assert 'name="borrow_requires_verified_recovery"' in editor
    response = client_for(world.admin).post(
        url + "edit/",
        form_data(world.background, borrow_requires_verified_recovery="on", reason="proven only"),
    )
    assert response.status_code == 302
    share = Share.objects.get(pk=world.background.pk)
    assert share.borrow_requires_verified_recovery is True
    entry = AuditEntry.objects.get(event_type=AuditEvent.SHARE_UPDATED, share_id=share.pk)
    assert entry.after["borrow_requires_verified_recovery"] is True
    page = client_for(world.admin).get(url).content.decode()
    assert "only for jobs of workloads with verified recovery" in page


def test_the_share_read_for_its_pages_follows_every_change(world):
    """The share with its limits, queue and team is kept under its queue's state: an
    edit of the share or of its team shows on the next view of its page, editor and
    ledger, and a deleted share is not found."""
    from governance.services.teams import team_update

    client = client_for(world.admin)
    url = f"/shares/{world.background.pk}/"
    pages = (url, url + "edit/", url + "ledger/")
    for page in pages:
        assert client.get(page).status_code == 200
    share_services.share_update(
        actor=world.admin,
        share=world.background,
        version=1,
        changes={"limits": {"ml.g5.xlarge": 2}},
        reason="more",
    )
    team_update(actor=world.admin, team=world.vision, changes={"name": "sight"})
    assert "2 \u00d7 ml.g5.xlarge" in client.get(url).content.decode()
    assert "team sight · version 2" in client.get(url + "edit/").content.decode()
    for page in pages:
        body = client.get(page).content.decode()
        assert "sight" in body and "team vision" not in body, page
    spare = share_services.share_create(
        actor=world.admin,
        queue=world.queue,
        team=world.speech,
        name="spare",
        limits={"ml.g5.xlarge": 1},
    )
    spare_url = f"/shares/{spare.pk}/"
    for page in (spare_url, spare_url + "edit/", spare_url + "ledger/"):
        assert client.get(page).status_code == 200
    share_services.share_delete(actor=world.admin, share=spare)
    for page in (spare_url, spare_url + "edit/", spare_url + "ledger/"):
        assert client.get(page).status_code == 404, page
