"""Capacity plans through their services (docs/scheduling.md#capacity-plans): create, resize, end,
the audit entries with their reasons, field-keyed errors; and job preferences naming plans."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, CapacityPlan, Job, JobKind, PlanState
from governance.selectors import plans as plan_selectors
from governance.selectors.capacity import queue_usage
from governance.services import jobs as job_services
from governance.services import plans as svc
from governance.services.errors import NotFound, PermissionDenied, ValidationFailed
from tests.factories import TeamFactory, make_share, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_world()


def create(world, **fields):
    now = timezone.now()
    values = {
        "actor": world.admin,
        "queue": world.queue,
        "share": world.red_share,
        "name": "red-december",
        "instance_type": "ml.p4d.24xlarge",
        "count": 2,
        "start": now - timedelta(hours=1),
        "end": now + timedelta(days=7),
        "hourly_price": "20.5",
        "reason": "bought for the release",
    }
    values.update(fields)
    return svc.plan_create(**values)


def errors_of(exc_info) -> dict[str, list[str]]:
    return exc_info.value.errors


def test_create_writes_the_plan_and_its_audit_entry(world):
    plan = create(world)
    assert plan.count == 2
    assert plan.hourly_price == Decimal("20.5")
    assert plan.state_at(timezone.now()) is PlanState.ACTIVE
    entry = AuditEntry.objects.get(event_type=AuditEvent.PLAN_CREATED)
    assert entry.actor == world.admin
    assert entry.reason == "bought for the release"
    assert entry.share_id == world.red_share.pk
    assert entry.team_id == world.red.pk
    assert entry.queue_id == world.queue.pk
    assert entry.after["name"] == "red-december"
    assert entry.after["instance_type"] == "ml.p4d.24xlarge"
    assert entry.after["count"] == 2
    assert entry.before is None


def test_price_defaults_to_zero(world):
    assert create(world, hourly_price=None).hourly_price == 0


@pytest.mark.parametrize("role", ["red_lead", "red_member", "reviewer", "outsider"])
def test_only_admins_create_resize_and_end(world, role):
    user = getattr(world, role)
    with pytest.raises(PermissionDenied):
        create(world, actor=user)
    plan = create(world)
    with pytest.raises(PermissionDenied):
        svc.plan_resize(actor=user, plan=plan, count=1, reason="x")
    with pytest.raises(PermissionDenied):
        svc.plan_end(actor=user, plan=plan, reason="x")
    assert CapacityPlan.objects.get().count == 2


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"instance_type": "ml.nope"}, "instance_type"),
        ({"count": -1}, "count"),
        ({"count": 10**9}, "count"),
        ({"count": True}, "count"),
        ({"count": "2"}, "count"),
        ({"queue": 10**30}, "queue"),
        ({"share": 999999}, "share"),
        ({"start": "tomorrow"}, "start"),
        ({"end": None}, "end"),
        ({"hourly_price": -1}, "hourly_price"),
        ({"hourly_price": "NaN"}, "hourly_price"),
        ({"hourly_price": 10**7}, "hourly_price"),
    ],
)
def test_create_errors_name_the_field(world, fields, field):
    with pytest.raises(ValidationFailed) as exc_info:
        create(world, **fields)
    assert field in errors_of(exc_info)
    assert not CapacityPlan.objects.exists()
    assert not AuditEntry.objects.filter(event_type=AuditEvent.PLAN_CREATED).exists()


def test_window_rules(world):
    now = timezone.now()
    with pytest.raises(ValidationFailed) as exc_info:
        create(world, start=now + timedelta(days=2), end=now + timedelta(days=1))
    assert "end" in errors_of(exc_info)
    with pytest.raises(ValidationFailed) as exc_info:
        create(world, start=now - timedelta(days=3), end=now - timedelta(days=1))
    assert "after start" not in errors_of(exc_info)["end"][0]
    assert "future" in errors_of(exc_info)["end"][0]
    with pytest.raises(ValidationFailed) as exc_info:
        create(world, start=now, end=now + timedelta(days=svc.MAX_PLAN_DAYS + 1))
    assert "end" in errors_of(exc_info)


def test_name_unique_in_queue_and_share_in_queue(world):
    create(world)
    with pytest.raises(ValidationFailed) as exc_info:
        create(world)
    assert "already has a plan" in errors_of(exc_info)["name"][0]
    from tests.factories import make_queue

    other_queue = make_queue("other", {"ml.g5.xlarge": 1})
    other_share = make_share(other_queue, TeamFactory(name="green"), "green")
    with pytest.raises(ValidationFailed) as exc_info:
        create(world, name="elsewhere", share=other_share)
    assert "another queue" in errors_of(exc_info)["share"][0]
    # The same name in another queue is fine.
    assert create(world, name="red-december", queue=other_queue, share=other_share)


def test_resize_audited_with_reason(world):
    plan = create(world)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.plan_resize(actor=world.admin, plan=plan, count=4, reason="")
    assert "reason" in errors_of(exc_info)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.plan_resize(actor=world.admin, plan=plan, count=-3, reason="more")
    assert "count" in errors_of(exc_info)
    plan = svc.plan_resize(actor=world.admin, plan=plan, count=4, reason="two more bought")
    assert CapacityPlan.objects.get().count == 4
    entry = AuditEntry.objects.get(event_type=AuditEvent.PLAN_RESIZED)
    assert entry.before["count"] == 2
    assert entry.after["count"] == 4
    assert entry.reason == "two more bought"
    # The same count again is no change: no entry.
    svc.plan_resize(actor=world.admin, plan=plan, count=4, reason="again")
    assert AuditEntry.objects.filter(event_type=AuditEvent.PLAN_RESIZED).count() == 1


def test_end_moves_end_to_now(world):
    plan = create(world)
    before = timezone.now()
    plan = svc.plan_end(actor=world.admin, plan=plan, reason="project cancelled")
    stored = CapacityPlan.objects.get()
    assert before <= stored.end <= timezone.now()
    assert stored.ended_at == stored.end
    assert stored.state_at(timezone.now()) is PlanState.ENDED
    entry = AuditEntry.objects.get(event_type=AuditEvent.PLAN_ENDED)
    assert entry.reason == "project cancelled"
    assert entry.before["ended_at"] is None
    assert entry.after["ended_at"] is not None
    with pytest.raises(ValidationFailed) as exc_info:
        svc.plan_end(actor=world.admin, plan=plan, reason="again")
    assert "already ended" in errors_of(exc_info)["end"][0]
    with pytest.raises(ValidationFailed) as exc_info:
        svc.plan_resize(actor=world.admin, plan=plan, count=1, reason="late")
    assert "ended" in errors_of(exc_info)["count"][0]


def test_upcoming_plan_cannot_be_ended(world):
    now = timezone.now()
    plan = create(world, start=now + timedelta(days=1), end=now + timedelta(days=2))
    with pytest.raises(ValidationFailed) as exc_info:
        svc.plan_end(actor=world.admin, plan=plan, reason="not needed")
    assert "not started" in errors_of(exc_info)["end"][0]


def test_unknown_plan_is_not_found(world):
    with pytest.raises(NotFound):
        svc.plan_resize(actor=world.admin, plan=10**30, count=1, reason="x")


def test_update_takes_count_only(world):
    plan = create(world)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.plan_update(actor=world.admin, plan=plan, changes={"name": "renamed"})
    assert "name" in errors_of(exc_info)
    plan = svc.plan_update(actor=world.admin, plan=plan, changes={"count": 3, "reason": "r"})
    assert plan.count == 3


# --- jobs naming plans ------------------------------------------------------------------


def submit(world, preferences, **fields):
    values = {
        "actor": world.red_lead,
        "share": world.red_share,
        "name": "train",
        "preferences": preferences,
    }
    values.update(fields)
    return job_services.job_submit(**values)


def test_training_job_names_its_share_plan_first(world):
    create(world)
    job = submit(
        world,
        [{"plan": "red-december", "count": 2}, {"instance_type": "ml.p4d.24xlarge", "count": 1}],
    )
    stored = Job.objects.get(pk=job.pk)
    assert stored.preferences == [
        {"plan": "red-december", "count": 2},
        {"instance_type": "ml.p4d.24xlarge", "count": 1},
    ]
    assert "2 on plan red-december" in stored.events.get().message


def test_common_count_fills_a_plan_preference(world):
    create(world)
    job = submit(world, [{"plan": "red-december"}, {"instance_type": "ml.p4d.24xlarge"}], count=1)
    assert job.preferences[0] == {"plan": "red-december", "count": 1}


@pytest.mark.parametrize(
    ("preferences", "fields", "needle"),
    [
        ([{"plan": "red-december", "count": 1}], {"kind": JobKind.PROCESSING}, "only training"),
        ([{"plan": "nope", "count": 1}], {}, "is not a plan of this share"),
        (
            [{"plan": "red-december", "instance_type": "ml.p4d.24xlarge", "count": 1}],
            {},
            "instance_type must not be given with a plan",
        ),
        (
            [{"plan": "red-december", "count": 1}, {"plan": "red-december", "count": 1}],
            {},
            "listed twice",
        ),
        ([{"plan": "", "count": 1}], {}, "preferences[0].plan"),
        ([{"plan": "red-december", "count": 0}], {}, "preferences[0].count"),
    ],
)
def test_plan_preference_errors_name_the_field(world, preferences, fields, needle):
    create(world)
    with pytest.raises(ValidationFailed) as exc_info:
        submit(world, preferences, **fields)
    messages = " ".join(errors_of(exc_info)["preferences"])
    assert needle in messages
    assert not Job.objects.exists()


def test_job_of_another_share_cannot_name_the_plan(world):
    create(world)
    with pytest.raises(ValidationFailed) as exc_info:
        submit(
            world,
            [{"plan": "red-december", "count": 1}],
            actor=world.blue_lead,
            share=world.blue_share,
        )
    assert "preferences[0].plan red-december is not a plan of this share" in " ".join(
        errors_of(exc_info)["preferences"]
    )


def test_ended_plan_cannot_be_named(world):
    plan = create(world)
    svc.plan_end(actor=world.admin, plan=plan, reason="done")
    with pytest.raises(ValidationFailed) as exc_info:
        submit(world, [{"plan": "red-december", "count": 1}])
    assert "preferences[0].plan red-december ended" in errors_of(exc_info)["preferences"][0]


def test_nameable_plans_are_active_and_upcoming(world):
    now = timezone.now()
    active = create(world)
    upcoming = create(
        world, name="red-next", start=now + timedelta(days=8), end=now + timedelta(days=9)
    )
    ended = create(world, name="red-old")
    svc.plan_end(actor=world.admin, plan=ended, reason="x")
    names = [p.name for p in plan_selectors.nameable_plans(world.red_share)]
    assert names == [active.name, upcoming.name]
    assert plan_selectors.nameable_plans(world.blue_share) == []


def test_plan_usage_apart_from_on_demand(world):
    plan = create(world)
    job = submit(world, [{"plan": "red-december", "count": 2}])
    Job.objects.filter(pk=job.pk).update(
        state="RUNNING", instance_type=plan.instance_type, preference=0, plan=plan
    )
    usage = queue_usage(world.queue)
    red = next(s for s in usage["shares"] if s["name"] == "red")
    p4d = next(r for r in red["types"] if r["instance_type"] == "ml.p4d.24xlarge")
    assert p4d["usage"] == 0  # a plan's usage is not the share's usage against its limits
    rows = queue_usage(world.queue)["plans"]
    assert [(r["name"], r["count"], r["usage"], r["state"]) for r in rows] == [
        ("red-december", 2, 2, "active")
    ]


def test_a_share_with_plans_cannot_be_deleted(world):
    from governance.services import shares as share_services

    share = make_share(world.queue, TeamFactory(name="green"), "green")
    create(world, share=share, name="green-plan")
    with pytest.raises(ValidationFailed) as exc_info:
        share_services.share_delete(actor=world.admin, share=share, reason="tidy")
    assert "capacity plans" in errors_of(exc_info)["share"][0]


def test_plan_first_pending_jobs_are_counted_on_the_plan(world):
    create(world)
    submit(
        world,
        [{"plan": "red-december", "count": 1}, {"instance_type": "ml.p4d.24xlarge", "count": 1}],
    )
    submit(world, [{"instance_type": "ml.p4d.24xlarge", "count": 1}], name="on-demand")
    usage = queue_usage(world.queue)
    red = next(s for s in usage["shares"] if s["name"] == "red")
    p4d = next(r for r in red["types"] if r["instance_type"] == "ml.p4d.24xlarge")
    assert p4d["pending"] == 1  # the on-demand-first job only
    assert [(p["name"], p["pending"]) for p in usage["plans"]] == [("red-december", 1)]
