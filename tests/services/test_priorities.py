"""Priority band rules and audit through the service; the band selectors."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from governance.models import AuditEntry, AuditEvent, PriorityDefinition
from governance.selectors.priorities import band_for, max_usable_priority
from governance.services import priorities as svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.factories import (
    TeamFactory,
    UserFactory,
    make_admin,
    make_lead,
    make_member,
    make_reviewer,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin():
    return make_admin()


def band(admin, name, low, high, **fields):
    return svc.priority_definition_create(
        actor=admin, name=name, min_priority=low, max_priority=high, **fields
    )


def test_create_audited(admin):
    UserFactory(username="owner")
    definition = band(
        admin,
        "urgent",
        500,
        999,
        criteria="release blocked",
        usable_by=["admin", "lead"],
        exception_owner="owner",
    )
    entry = AuditEntry.objects.get()
    assert entry.event_type == AuditEvent.PRIORITY_DEFINITION_CREATED
    assert entry.actor == admin
    assert entry.after == {
        "id": definition.pk,
        "name": "urgent",
        "min_priority": 500,
        "max_priority": 999,
        "criteria": "release blocked",
        "usable_by": ["lead", "admin"],
        "exception_owner": "owner",
    }


@pytest.mark.parametrize(
    ("low", "high", "fields", "field"),
    [
        (-1, 10, {}, "min_priority"),
        (0, 10000, {}, "max_priority"),
        (10, 5, {}, "max_priority"),
        (None, 5, {}, "min_priority"),
        (0, 5, {"usable_by": ["boss"]}, "usable_by"),
        (0, 5, {"exception_owner": "ghost"}, "exception_owner"),
        (0, 5, {"name": ""}, "name"),
    ],
)
def test_rules(admin, low, high, fields, field):
    fields.setdefault("name", "b")
    with pytest.raises(ValidationFailed) as exc:
        svc.priority_definition_create(actor=admin, min_priority=low, max_priority=high, **fields)
    assert field in exc.value.errors
    assert not PriorityDefinition.objects.exists()
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(("low", "high"), [(50, 150), (100, 100), (0, 9999), (199, 300)])
def test_bands_may_not_overlap(admin, low, high):
    band(admin, "normal", 100, 199)
    with pytest.raises(ValidationFailed) as exc:
        band(admin, "other", low, high)
    for field in ("min_priority", "max_priority"):
        assert "normal" in exc.value.errors[field][0]
        assert "100-199" in exc.value.errors[field][0]
    assert PriorityDefinition.objects.count() == 1


def test_adjacent_bands_are_fine(admin):
    band(admin, "normal", 100, 199)
    band(admin, "low", 0, 99)
    band(admin, "high", 200, 9999)


def test_update_checks_overlap_against_others_only(admin):
    normal = band(admin, "normal", 100, 199)
    band(admin, "high", 200, 299)
    svc.priority_definition_update(actor=admin, definition=normal, changes={"min_priority": 50})
    with pytest.raises(ValidationFailed) as exc:
        svc.priority_definition_update(
            actor=admin, definition=normal, changes={"max_priority": 250}
        )
    assert "high" in exc.value.errors["max_priority"][0]
    normal.refresh_from_db()
    assert (normal.min_priority, normal.max_priority) == (50, 199)
    entry = AuditEntry.objects.get(event_type=AuditEvent.PRIORITY_DEFINITION_UPDATED)
    assert entry.before["min_priority"] == 100
    assert entry.after["min_priority"] == 50


def test_delete_audited(admin):
    definition = band(admin, "normal", 100, 199)
    svc.priority_definition_delete(actor=admin, definition=definition)
    assert not PriorityDefinition.objects.exists()
    entry = AuditEntry.objects.get(event_type=AuditEvent.PRIORITY_DEFINITION_DELETED)
    assert entry.before["name"] == "normal"
    assert entry.after is None


def test_only_admins_write():
    definition = PriorityDefinition.objects.create(name="b", min_priority=0, max_priority=9)
    for actor in (make_reviewer(), UserFactory(username="x")):
        with pytest.raises(PermissionDenied):
            svc.priority_definition_create(actor=actor, name="c", min_priority=10, max_priority=20)
        with pytest.raises(PermissionDenied):
            svc.priority_definition_update(actor=actor, definition=definition, changes={})
        with pytest.raises(PermissionDenied):
            svc.priority_definition_delete(actor=actor, definition=definition)
    assert PriorityDefinition.objects.count() == 1


def test_band_for_and_max_usable_priority(admin):
    team = TeamFactory(name="red")
    other = TeamFactory(name="blue")
    band(admin, "low", 0, 99, usable_by=["member", "lead"])
    band(admin, "normal", 100, 499, usable_by=["lead"])
    band(admin, "urgent", 500, 999, usable_by=["admin"])
    band(admin, "review", 1000, 1999, usable_by=["reviewer"])
    assert band_for(250).name == "normal"
    assert band_for(5000) is None
    member = make_member(team, "m")
    lead = make_lead(team, "l")
    assert max_usable_priority(member, team) == 99
    assert max_usable_priority(lead, team) == 499
    assert max_usable_priority(lead, other) is None
    assert max_usable_priority(admin, None) == 999
    assert max_usable_priority(make_reviewer(), team) == 1999
    assert max_usable_priority(UserFactory(username="nobody"), team) is None


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_cannot_overlap():
    """Two admins create overlapping bands at once: the table lock lets only one in."""
    admin = make_admin()
    results: list[str] = []
    barrier = threading.Barrier(2)

    def worker(name: str) -> None:
        try:
            barrier.wait()
            svc.priority_definition_create(
                actor=admin, name=name, min_priority=100, max_priority=200
            )
            results.append("ok")
        except ValidationFailed:
            results.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["ok", "refused"]
    assert PriorityDefinition.objects.count() == 1
