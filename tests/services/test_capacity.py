"""Instance type and queue rules through the services; capacity changes and usage."""

from __future__ import annotations

from decimal import Decimal

import pytest

from governance.models import AuditEntry, AuditEvent, InstanceType, JobQueue, JobState
from governance.selectors.capacity import queue_usage
from governance.services import capacity as svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.factories import (
    InstanceTypeFactory,
    TeamFactory,
    UserFactory,
    make_admin,
    make_job,
    make_queue,
    make_share,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin():
    return make_admin()


@pytest.mark.parametrize(
    ("name", "accelerated"),
    [
        ("ml.g5.xlarge", True),
        ("ml.gr6.4xlarge", True),
        ("ml.p4d.24xlarge", True),
        ("ml.trn1.32xlarge", True),
        ("ml.m5.large", False),
        ("ml.c5.xlarge", False),
    ],
)
def test_accelerated_defaults_from_family(admin, name, accelerated):
    itype = svc.instance_type_create(actor=admin, name=name)
    assert itype.accelerated is accelerated


def test_accelerated_explicit_wins(admin):
    assert svc.instance_type_create(actor=admin, name="ml.m5.large", accelerated=True).accelerated


def test_instance_type_create_audited(admin):
    itype = svc.instance_type_create(
        actor=admin, name="ml.g5.xlarge", accelerators=1, speed=1.5, hourly_price="1.41"
    )
    entry = AuditEntry.objects.get()
    assert entry.event_type == AuditEvent.INSTANCE_TYPE_CREATED
    assert entry.actor == admin
    assert entry.after == {
        "id": itype.pk,
        "name": "ml.g5.xlarge",
        "accelerated": True,
        "accelerators": 1,
        "speed": 1.5,
        "hourly_price": "1.4100",
    }


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "ml.g5.xlarge", "accelerators": -1}, "accelerators"),
        ({"name": "ml.g5.xlarge", "speed": 0}, "speed"),
        ({"name": "ml.g5.xlarge", "speed": -1.0}, "speed"),
        ({"name": "ml.g5.xlarge", "hourly_price": -1}, "hourly_price"),
        ({"name": "ml.g5.xlarge", "hourly_price": "abc"}, "hourly_price"),
    ],
)
def test_instance_type_rules(admin, fields, field):
    with pytest.raises(ValidationFailed) as exc:
        svc.instance_type_create(actor=admin, **fields)
    assert field in exc.value.errors
    assert not InstanceType.objects.exists()


def test_instance_type_name_unique(admin):
    InstanceTypeFactory(name="ml.g5.xlarge")
    with pytest.raises(ValidationFailed) as exc:
        svc.instance_type_create(actor=admin, name="ml.g5.xlarge")
    assert "name" in exc.value.errors


def test_instance_type_update_audited_and_no_rename(admin):
    itype = InstanceTypeFactory(name="ml.g5.xlarge", speed=1.0)
    svc.instance_type_update(actor=admin, instance_type=itype, changes={"speed": 2.0})
    entry = AuditEntry.objects.get()
    assert entry.event_type == AuditEvent.INSTANCE_TYPE_UPDATED
    assert entry.before["speed"] == 1.0
    assert entry.after["speed"] == 2.0
    with pytest.raises(ValidationFailed) as exc:
        svc.instance_type_update(actor=admin, instance_type=itype, changes={"name": "other"})
    assert "name" in exc.value.errors
    itype.refresh_from_db()
    assert itype.name == "ml.g5.xlarge"


def test_queue_create_audited(admin):
    InstanceTypeFactory(name="ml.g5.xlarge")
    queue = svc.queue_create(actor=admin, name="main", capacity={"ml.g5.xlarge": 4})
    entry = AuditEntry.objects.get()
    assert entry.event_type == AuditEvent.QUEUE_CREATED
    assert entry.queue_id == queue.pk
    assert entry.after == {
        "id": queue.pk,
        "name": "main",
        "description": "",
        "executor": "simulated",
        "capacity": {"ml.g5.xlarge": 4},
    }


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"name": ""}, "name", "name"),
        ({"name": "q", "executor": "cloud"}, "executor", "simulated"),
        ({"name": "q", "capacity": {"ml.nope": 1}}, "capacity", "ml.nope"),
        ({"name": "q", "capacity": {"ml.g5.xlarge": -1}}, "capacity", "ml.g5.xlarge"),
        ({"name": "q", "capacity": {"ml.g5.xlarge": 1.5}}, "capacity", "ml.g5.xlarge"),
        ({"name": "q", "capacity": [1]}, "capacity", "map"),
    ],
)
def test_queue_rules(admin, fields, field, fragment):
    InstanceTypeFactory(name="ml.g5.xlarge")
    with pytest.raises(ValidationFailed) as exc:
        svc.queue_create(actor=admin, **fields)
    assert fragment in " ".join(exc.value.errors[field])
    assert not JobQueue.objects.exists()
    assert not AuditEntry.objects.exists()


def test_queue_name_unique(admin):
    make_queue("main")
    with pytest.raises(ValidationFailed) as exc:
        svc.queue_create(actor=admin, name="MAIN")
    assert "name" in exc.value.errors


def test_capacity_change_is_its_own_audited_change(admin, django_capture_on_commit_callbacks):
    queue = make_queue("main", {"ml.g5.xlarge": 3})
    InstanceTypeFactory(name="ml.p4d.24xlarge")
    with django_capture_on_commit_callbacks() as callbacks:
        svc.queue_update(
            actor=admin,
            queue=queue,
            changes={"name": "primary", "capacity": {"ml.g5.xlarge": 2, "ml.p4d.24xlarge": 1}},
            reason="provider shortage",
        )
    assert len(callbacks) == 1  # hooks.queue_changed asked for a cycle after commit
    updated = AuditEntry.objects.get(event_type=AuditEvent.QUEUE_UPDATED)
    assert updated.before["name"] == "main"
    assert updated.after["name"] == "primary"
    changed = AuditEntry.objects.get(event_type=AuditEvent.CAPACITY_CHANGED)
    assert changed.actor == admin
    assert changed.queue_id == queue.pk
    assert changed.reason == "provider shortage"
    assert changed.before == {"capacity": {"ml.g5.xlarge": 3}}
    assert changed.after == {"capacity": {"ml.g5.xlarge": 2, "ml.p4d.24xlarge": 1}}


def test_removing_a_type_a_share_limits_is_refused(admin):
    queue = make_queue("main", {"ml.g5.xlarge": 3, "ml.p4d.24xlarge": 1})
    make_share(queue, TeamFactory(name="red"), "red", {"ml.p4d.24xlarge": 1})
    with pytest.raises(ValidationFailed) as exc:
        svc.queue_set_capacity(actor=admin, queue=queue, capacity={"ml.g5.xlarge": 3})
    message = exc.value.errors["capacity"][0]
    assert "ml.p4d.24xlarge" in message and "red" in message
    assert svc.capacity_map(queue) == {"ml.g5.xlarge": 3, "ml.p4d.24xlarge": 1}
    assert not AuditEntry.objects.exists()
    # Dropping it to zero is allowed: the share keeps its (now unusable) limit.
    svc.queue_set_capacity(
        actor=admin, queue=queue, capacity={"ml.g5.xlarge": 3, "ml.p4d.24xlarge": 0}
    )
    assert svc.capacity_map(queue)["ml.p4d.24xlarge"] == 0


def test_only_admins_write_capacity():
    queue = make_queue("main")
    user = UserFactory(username="someone")
    with pytest.raises(PermissionDenied):
        svc.instance_type_create(actor=user, name="ml.m5.large")
    with pytest.raises(PermissionDenied):
        svc.queue_create(actor=user, name="other")
    with pytest.raises(PermissionDenied):
        svc.queue_set_capacity(actor=user, queue=queue, capacity={})
    assert not AuditEntry.objects.exists()


def test_price_is_stored_exactly(admin):
    itype = svc.instance_type_create(actor=admin, name="ml.g5.xlarge", hourly_price=1.41)
    itype.refresh_from_db()
    assert itype.hourly_price == Decimal("1.4100")


# --- usage accounting ------------------------------------------------------------------


def _run(share, user, type_name, count, state=JobState.RUNNING):
    itype = InstanceTypeFactory(name=type_name)
    return make_job(
        share,
        user,
        state=state,
        instance_type=itype if state == JobState.RUNNING else None,
        preference=0 if state == JobState.RUNNING else None,
        preferences=[{"instance_type": type_name, "count": count}],
    )


def test_usage_own_borrowed_idle_lent_pending():
    queue = make_queue("main", {"ml.g5.xlarge": 6})
    user = UserFactory(username="u")
    lender_a = make_share(queue, TeamFactory(name="a"), "a", {"ml.g5.xlarge": 2}, policy="LEND")
    lender_b = make_share(queue, TeamFactory(name="b"), "b", {"ml.g5.xlarge": 2}, policy="LEND")
    make_share(queue, TeamFactory(name="c"), "c", {"ml.g5.xlarge": 1}, policy="RESERVE")
    borrower = make_share(
        queue,
        TeamFactory(name="d"),
        "d",
        {"ml.g5.xlarge": 1},
        policy="LEND_AND_BORROW",
        borrow_limit=-1,
    )
    _run(borrower, user, "ml.g5.xlarge", 4)  # 1 own + 3 borrowed
    _run(lender_b, user, "ml.g5.xlarge", 1)
    _run(lender_a, user, "ml.g5.xlarge", 1, state=JobState.PENDING)
    _run(lender_a, user, "ml.g5.xlarge", 1, state=JobState.SUCCEEDED)

    usage = queue_usage(queue)
    rows = {s["name"]: s["types"][0] for s in usage["shares"]}
    # capacity 6, limits 6: nothing unowned; the 3 borrowed lie on a (2 idle) then b (1 idle).
    assert rows["a"] == {
        "instance_type": "ml.g5.xlarge",
        "limit": 2,
        "usage": 0,
        "own": 0,
        "borrowed": 0,
        "lent": 2,
        "idle": 2,
        "pending": 1,
    }
    assert rows["b"] == {
        "instance_type": "ml.g5.xlarge",
        "limit": 2,
        "usage": 1,
        "own": 1,
        "borrowed": 0,
        "lent": 1,
        "idle": 1,
        "pending": 0,
    }
    assert rows["c"]["lent"] == 0 and rows["c"]["idle"] == 1  # RESERVE never lends
    assert rows["d"] == {
        "instance_type": "ml.g5.xlarge",
        "limit": 1,
        "usage": 4,
        "own": 1,
        "borrowed": 3,
        "lent": 0,
        "idle": 0,
        "pending": 0,
    }
    assert usage["types"] == [
        {
            "instance_type": "ml.g5.xlarge",
            "capacity": 6,
            "limits": 6,
            "usage": 5,
            "borrowed": 3,
            "unowned": 0,
            "oversubscribed": False,
        }
    ]


def test_usage_on_type_without_limit_counts_as_borrowed():
    queue = make_queue("main", {"ml.g5.xlarge": 4, "ml.p4d.24xlarge": 2})
    share = make_share(queue, TeamFactory(name="a"), "a", {"ml.g5.xlarge": 2})
    _run(share, UserFactory(username="u"), "ml.p4d.24xlarge", 2)
    rows = {row["instance_type"]: row for row in queue_usage(queue)["shares"][0]["types"]}
    assert rows["ml.p4d.24xlarge"]["limit"] == 0
    assert rows["ml.p4d.24xlarge"]["borrowed"] == 2


def test_usage_query_count_does_not_grow_with_shares(django_assert_max_num_queries):
    queue = make_queue("main", {"ml.g5.xlarge": 40})
    user = UserFactory(username="u")
    for i in range(8):
        share = make_share(queue, TeamFactory(name=f"t{i}"), f"s{i}", {"ml.g5.xlarge": 2})
        _run(share, user, "ml.g5.xlarge", 1)
    with django_assert_max_num_queries(6):
        queue_usage(queue)
