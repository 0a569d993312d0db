"""Team and membership rules through the service, with their audit entries."""

from __future__ import annotations

import pytest

from governance.models import AuditEntry, AuditEvent, Membership, Team
from governance.services import teams as svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.factories import TeamFactory, UserFactory, make_admin, make_lead, make_member

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin():
    return make_admin()


def test_create_with_leads_and_members_is_audited(admin):
    UserFactory(username="ann")
    UserFactory(username="bob")
    team = svc.team_create(actor=admin, name=" vision ", leads=["ann"], members=["bob"])
    assert team.name == "vision"
    assert svc.membership_snapshot(team) == {"leads": ["ann"], "members": ["bob"]}
    entry = AuditEntry.objects.get()
    assert entry.event_type == AuditEvent.TEAM_CREATED
    assert entry.actor == admin
    assert entry.team_id == team.pk
    assert entry.before is None
    assert entry.after == {
        "id": team.pk,
        "name": "vision",
        "description": "",
        "leads": ["ann"],
        "members": ["bob"],
    }


@pytest.mark.parametrize("name", ["", "   ", None])
def test_name_required(admin, name):
    with pytest.raises(ValidationFailed) as exc:
        svc.team_create(actor=admin, name=name)
    assert "name" in exc.value.errors
    assert not Team.objects.exists()
    assert not AuditEntry.objects.exists()


def test_name_unique_case_insensitive(admin):
    TeamFactory(name="vision")
    with pytest.raises(ValidationFailed) as exc:
        svc.team_create(actor=admin, name="Vision")
    assert "name" in exc.value.errors
    assert Team.objects.count() == 1


def test_unknown_usernames_named_per_field(admin):
    with pytest.raises(ValidationFailed) as exc:
        svc.team_create(actor=admin, name="t", leads=["ghost"], members=["spook"])
    assert "ghost" in exc.value.errors["leads"][0]
    assert "spook" in exc.value.errors["members"][0]
    assert not Team.objects.exists()


def test_user_cannot_be_lead_and_member(admin):
    UserFactory(username="ann")
    with pytest.raises(ValidationFailed) as exc:
        svc.team_create(actor=admin, name="t", leads=["ann"], members=["ann"])
    assert "ann" in exc.value.errors["members"][0]
    assert not Team.objects.exists()


def test_update_name_and_membership_audited_separately(admin):
    team = TeamFactory(name="vision")
    make_lead(team, "ann")
    make_member(team, "bob")
    UserFactory(username="cid")
    svc.team_update(actor=admin, team=team, changes={"name": "vision2", "members": ["bob", "cid"]})
    team.refresh_from_db()
    assert team.name == "vision2"
    updated = AuditEntry.objects.get(event_type=AuditEvent.TEAM_UPDATED)
    assert updated.before == {"name": "vision", "description": ""}
    assert updated.after == {"name": "vision2", "description": ""}
    changed = AuditEntry.objects.get(event_type=AuditEvent.MEMBERSHIP_CHANGED)
    assert changed.actor == admin
    assert changed.team_id == team.pk
    assert changed.before == {"leads": ["ann"], "members": ["bob"]}
    assert changed.after == {"leads": ["ann"], "members": ["bob", "cid"]}


def test_promote_member_to_lead(admin):
    team = TeamFactory(name="vision")
    make_member(team, "bob")
    svc.team_update(actor=admin, team=team, changes={"leads": ["bob"], "members": []})
    assert Membership.objects.get(team=team).role == "lead"


def test_patch_leads_overlapping_existing_member_is_refused(admin):
    team = TeamFactory(name="vision")
    make_member(team, "bob")
    with pytest.raises(ValidationFailed) as exc:
        svc.team_update(actor=admin, team=team, changes={"leads": ["bob"]})
    assert "leads" in exc.value.errors
    assert Membership.objects.get(team=team).role == "member"
    assert not AuditEntry.objects.exists()


def test_no_change_no_audit(admin):
    team = TeamFactory(name="vision")
    svc.team_update(actor=admin, team=team, changes={"name": "vision"})
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("role", ["member", "lead", "reviewer", "outsider"])
def test_only_admins_write(role):
    from tests.factories import make_reviewer

    team = TeamFactory(name="vision")
    actor = {
        "member": lambda: make_member(team),
        "lead": lambda: make_lead(team),
        "reviewer": lambda: make_reviewer(),
        "outsider": lambda: UserFactory(username="x"),
    }[role]()
    with pytest.raises(PermissionDenied):
        svc.team_create(actor=actor, name="other")
    with pytest.raises(PermissionDenied):
        svc.team_update(actor=actor, team=team, changes={"name": "renamed"})
    assert list(Team.objects.values_list("name", flat=True)) == ["vision"]
