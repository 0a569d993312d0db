"""Allocation agreement rules, versions, search vector and audit, through the services."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from governance.models import Agreement, AgreementVersion, AuditEntry, AuditEvent
from governance.selectors import agreements as selectors
from governance.services import agreements as svc
from governance.services.errors import Conflict, PermissionDenied, ValidationFailed
from tests.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def w() -> Any:
    return make_world()


def create(w: Any, actor: Any = None, **fields: Any) -> Agreement:
    fields.setdefault("title", "Vision training reserve")
    fields.setdefault("body", "Red keeps two g5 for nightly training.")
    fields.setdefault("shares", [w.red_share.pk])
    return svc.agreement_create(actor=actor or w.red_lead, **fields)


def test_create_defaults_owner_writes_version_1_and_audit(w: Any) -> None:
    agreement = create(
        w,
        reclaim_assumptions="Borrowers lose at most one hour of work.",
        editors=["red_member"],
        review_by=datetime.date(2030, 1, 1),
    )
    assert agreement.owner == w.red_lead
    assert agreement.version == 1
    assert list(agreement.editors.all()) == [w.red_member]
    version = AgreementVersion.objects.get(agreement=agreement)
    assert (version.version, version.title, version.share_ids) == (
        1,
        "Vision training reserve",
        [w.red_share.pk],
    )
    assert version.edited_by == w.red_lead
    entry = AuditEntry.objects.get()
    assert entry.event_type == AuditEvent.AGREEMENT_CREATED
    assert entry.actor == w.red_lead
    assert entry.before is None
    assert entry.after["title"] == "Vision training reserve"
    assert entry.after["owner"] == "red_lead"
    assert entry.after["editors"] == ["red_member"]
    assert entry.share_id == w.red_share.pk


def test_create_with_other_owner(w: Any) -> None:
    assert create(w, w.admin, owner="red_member").owner == w.red_member


@pytest.mark.parametrize("who", ["red_member", "reviewer", "outsider"])
def test_only_admins_and_leads_create(w: Any, who: str) -> None:
    with pytest.raises(PermissionDenied):
        create(w, getattr(w, who), shares=[])
    assert not Agreement.objects.exists()


def test_lead_links_only_own_teams_shares(w: Any) -> None:
    with pytest.raises(PermissionDenied) as exc_info:
        create(w, w.red_lead, shares=[w.red_share.pk, w.blue_share.pk])
    assert "shares" in exc_info.value.errors
    assert "blue" in exc_info.value.errors["shares"][0]
    assert not Agreement.objects.exists()


def test_admin_links_any_share(w: Any) -> None:
    agreement = create(w, w.admin, shares=[w.red_share.pk, w.blue_share.pk])
    assert agreement.shares.count() == 2


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"title": " "}, "title"),
        ({"title": "x" * 201}, "title"),
        ({"shares": [999999]}, "shares"),
        ({"owner": "nobody"}, "owner"),
        ({"editors": ["ghost"]}, "editors"),
    ],
)
def test_create_validation(w: Any, fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as exc_info:
        create(w, w.admin, **fields)
    assert field in exc_info.value.errors
    assert not Agreement.objects.exists()
    assert not AuditEntry.objects.exists()


def test_update_bumps_version_keeps_history_and_audits(w: Any) -> None:
    agreement = create(w)
    svc.agreement_update(
        actor=w.red_lead, agreement=agreement, version=1, reason="more room", title="New title"
    )
    agreement.refresh_from_db()
    assert agreement.version == 2
    assert agreement.title == "New title"
    versions = list(AgreementVersion.objects.filter(agreement=agreement).order_by("version"))
    assert [(v.version, v.title) for v in versions] == [
        (1, "Vision training reserve"),
        (2, "New title"),
    ]
    assert versions[1].reason == "more room"
    entry = AuditEntry.objects.get(event_type=AuditEvent.AGREEMENT_UPDATED)
    assert entry.before["title"] == "Vision training reserve"
    assert entry.after["title"] == "New title"
    assert (entry.before["version"], entry.after["version"]) == (1, 2)
    assert entry.reason == "more room"


def test_stale_version_conflicts_and_writes_nothing(w: Any) -> None:
    agreement = create(w)
    svc.agreement_update(actor=w.red_lead, agreement=agreement, version=1, body="b")
    with pytest.raises(Conflict) as exc_info:
        svc.agreement_update(actor=w.red_lead, agreement=agreement, version=1, title="late")
    assert "version" in exc_info.value.errors
    agreement.refresh_from_db()
    assert agreement.title == "Vision training reserve"
    assert agreement.version == 2


def test_version_required(w: Any) -> None:
    agreement = create(w)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.agreement_update(actor=w.red_lead, agreement=agreement, version=None, title="x")
    assert "version" in exc_info.value.errors


@pytest.mark.parametrize(
    ("who", "allowed"),
    [
        ("red_lead", True),  # owner
        ("red_member", True),  # editor
        ("admin", True),
        ("blue_lead", False),
        ("reviewer", False),
        ("outsider", False),
    ],
)
def test_who_may_change(w: Any, who: str, allowed: bool) -> None:
    agreement = create(w, editors=["red_member"])
    if allowed:
        svc.agreement_update(actor=getattr(w, who), agreement=agreement, version=1, body="x")
        agreement.refresh_from_db()
        assert agreement.body == "x"
    else:
        with pytest.raises(PermissionDenied):
            svc.agreement_update(actor=getattr(w, who), agreement=agreement, version=1, body="x")
        agreement.refresh_from_db()
        assert agreement.version == 1


def test_editor_may_not_change_owner_or_editors(w: Any) -> None:
    agreement = create(w, editors=["red_member"])
    for field, value in (("owner", "red_member"), ("editors", [])):
        with pytest.raises(PermissionDenied) as exc_info:
            svc.agreement_update(
                actor=w.red_member, agreement=agreement, version=1, **{field: value}
            )
        assert field in exc_info.value.errors


def test_owner_hands_over(w: Any) -> None:
    agreement = create(w)
    svc.agreement_update(
        actor=w.red_lead, agreement=agreement, version=1, owner="red_member", editors=["red_lead"]
    )
    agreement.refresh_from_db()
    assert agreement.owner == w.red_member
    assert list(agreement.editors.values_list("username", flat=True)) == ["red_lead"]


def test_lead_may_not_add_other_teams_share_but_may_keep_linked(w: Any) -> None:
    agreement = create(w)
    with pytest.raises(PermissionDenied) as exc_info:
        svc.agreement_update(
            actor=w.red_lead, agreement=agreement, version=1, shares=[w.blue_share.pk]
        )
    assert "shares" in exc_info.value.errors
    both = create(w, w.admin, shares=[w.red_share.pk, w.blue_share.pk], owner="red_lead")
    # Keeping the already linked blue share while editing is fine.
    svc.agreement_update(
        actor=w.red_lead, agreement=both, version=1, shares=[w.blue_share.pk], body="edited"
    )
    assert list(both.shares.all()) == [w.blue_share]


def test_no_change_writes_nothing(w: Any) -> None:
    agreement = create(w)
    svc.agreement_update(actor=w.red_lead, agreement=agreement, version=1, title=agreement.title)
    agreement.refresh_from_db()
    assert agreement.version == 1
    assert not AuditEntry.objects.filter(event_type=AuditEvent.AGREEMENT_UPDATED).exists()


def test_search_ranks_title_above_body_and_follows_edits(w: Any) -> None:
    title_hit = create(w, w.admin, title="Preemption budget", body="", shares=[])
    body_hit = create(
        w, w.admin, title="Nightly training", body="The preemption of borrowers.", shares=[]
    )
    create(w, w.admin, title="Unrelated", body="nothing here", shares=[])
    assert list(selectors.search_agreements("preemption")) == [title_hit, body_hit]
    assert list(selectors.search_agreements("recovery checkpoints")) == []
    svc.agreement_update(
        actor=w.admin,
        agreement=body_hit,
        version=1,
        recovery_assumptions="Jobs resume from hourly checkpoints; recovery within a day.",
    )
    assert list(selectors.search_agreements("recovery checkpoints")) == [body_hit]
    assert list(selectors.search_agreements('"preemption budget"')) == [title_hit]
    assert list(selectors.search_agreements("preemption -budget")) == [body_hit]
