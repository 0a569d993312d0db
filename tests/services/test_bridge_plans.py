"""The live scheduler with capacity plans (docs/scheduling.md#capacity-plans): the bridge loads a
queue's plans into the engine, starts and ends them on time (time-driven instants of
the cycle), applies resizes like capacity, and admitted runs record their plan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from governance.models import AuditEntry, AuditEvent, CapacityPlan, Job, JobEvent, JobState
from governance.selectors.capacity import queue_usage
from scheduler.cycle.run import run_cycle
from tests.factories import (
    InstanceTypeFactory,
    TeamFactory,
    make_job,
    make_lead,
    make_queue,
    make_share,
)

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
T0 = datetime(2025, 1, 6, 9, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


@pytest.fixture
def w() -> SimpleNamespace:
    """Queue of 2 x G5; share ``red`` (limit 2, in-share preemption on) with plan
    ``red-plan`` of 2 x G5 from T0+100 s to T0+1000 s."""
    queue = make_queue("training", {G5: 2})
    team = TeamFactory(name="red")
    red = make_share(queue, team, "red", {G5: 2}, in_share_preemption=True)
    lead = make_lead(team, "red_lead")
    plan = CapacityPlan.objects.create(
        queue=queue,
        share=red,
        name="red-plan",
        instance_type=InstanceTypeFactory(name=G5),
        count=2,
        start=at(100),
        end=at(1000),
    )
    return SimpleNamespace(queue=queue, red=red, lead=lead, plan=plan)


def job(w: SimpleNamespace, name: str, preferences: list[dict[str, Any]], **fields: Any) -> Job:
    fields.setdefault("duration", 36000)
    fields.setdefault("submitted_at", T0)
    return make_job(w.red, w.lead, name=name, preferences=preferences, **fields)


PLAN_FIRST = [{"plan": "red-plan", "count": 2}, {"instance_type": G5, "count": 2}]


def test_plan_starts_on_time_and_the_run_records_it(w):
    waiting = job(w, "plan-only", [{"plan": "red-plan", "count": 2}])
    result = run_cycle(w.queue.pk, now=at(0))
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING
    # The plan's start is the next time-driven instant of the queue.
    assert result.next_event_in is not None
    assert result.next_event_in == pytest.approx((at(100) - at(0)).total_seconds(), abs=1)

    run_cycle(w.queue.pk, now=at(100))
    waiting.refresh_from_db()
    assert waiting.state == JobState.RUNNING
    assert waiting.plan_id == w.plan.pk
    assert waiting.preference == 0
    admitted = AuditEntry.objects.get(event_type=AuditEvent.JOB_ADMITTED, job_id=waiting.pk)
    assert admitted.after["rule"] == "plan"
    assert admitted.after["plan"] == "red-plan"
    assert "capacity plan red-plan" in admitted.reason
    # Plan instances are apart from the queue's: the share's on-demand usage is 0 and
    # the plan shows its usage.
    usage = queue_usage(w.queue)
    assert usage["shares"][0]["types"][0]["usage"] == 0
    assert [(p["name"], p["usage"]) for p in usage["plans"]] == [("red-plan", 2)]


def test_plan_first_then_on_demand_alongside(w):
    first = job(w, "first", PLAN_FIRST)
    second = job(w, "second", PLAN_FIRST, submitted_at=at(1))
    run_cycle(w.queue.pk, now=at(100))
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, first.plan_id, first.preference) == (JobState.RUNNING, w.plan.pk, 0)
    # The plan is full: the second job falls through to on-demand capacity.
    assert (second.state, second.plan_id, second.preference) == (JobState.RUNNING, None, 1)


def test_plan_end_preempts_not_counted_and_falls_back(w):
    on_plan = job(w, "on-plan", PLAN_FIRST)
    run_cycle(w.queue.pk, now=at(100))
    on_plan.refresh_from_db()
    assert on_plan.plan_id == w.plan.pk
    result = run_cycle(w.queue.pk, now=at(500))
    assert result.next_event_in is not None
    run_cycle(w.queue.pk, now=at(1000))
    on_plan.refresh_from_db()
    # Stopped with plan_ended, not counted against retries, and started again at once
    # on its on-demand preference.
    assert on_plan.state == JobState.RUNNING
    assert on_plan.plan_id is None
    assert on_plan.preference == 1
    assert on_plan.preemptions == 1
    assert on_plan.counted_preemptions == 0
    preempted = JobEvent.objects.get(job=on_plan, type="preempted")
    assert preempted.data["reason"] == "plan_ended"
    assert preempted.data["counted"] is False
    assert "plan red-plan ended" in preempted.message


def test_plan_end_with_zero_retries_does_not_fail(w):
    w.red.preemption_retries = 0
    w.red.save()
    on_plan = job(w, "on-plan", [{"plan": "red-plan", "count": 1}])
    run_cycle(w.queue.pk, now=at(100))
    run_cycle(w.queue.pk, now=at(1000))
    on_plan.refresh_from_db()
    assert on_plan.state == JobState.PENDING  # not FAILED: a plan end is nobody's doing


def test_resize_down_preempts_within_the_plan_as_capacity_lost(w):
    jobs = [
        job(w, f"j{i}", [{"plan": "red-plan", "count": 1}], submitted_at=at(i)) for i in range(2)
    ]
    run_cycle(w.queue.pk, now=at(100))
    assert Job.objects.filter(plan=w.plan, state=JobState.RUNNING).count() == 2
    CapacityPlan.objects.filter(pk=w.plan.pk).update(count=1)
    run_cycle(w.queue.pk, now=at(200))
    states = sorted(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True))
    assert states == [JobState.PENDING, JobState.RUNNING]
    stopped = JobEvent.objects.get(type="preempted", job__in=jobs)
    assert stopped.data["reason"] == "capacity_lost"
    assert stopped.data["counted"] is False
    assert "resized to 1" in stopped.message


def test_explain_plan_reasons(w):
    from scheduler import readings

    too_big = job(w, "too-big", [{"plan": "red-plan", "count": 3}])
    reasons, _ = readings.explain_queue(w.queue.pk)
    # Before the plan's start (real now is long after T0+1000: the plan has ended).
    assert [r["reason"] for r in reasons[too_big.pk]] == ["plan_not_active"]


def test_a_reading_holds_until_the_next_plan_instant(w):
    """Reasons read now change at the plan's start without any stored change, so the
    reading says it holds at most until then."""
    from django.utils import timezone

    from scheduler import readings

    start = timezone.now() + timedelta(hours=1)
    CapacityPlan.objects.filter(pk=w.plan.pk).update(start=start, end=start + timedelta(days=1))
    waiting = job(w, "waits", [{"plan": "red-plan", "count": 1}], duration=None)
    reasons, valid_for = readings.explain_queue(w.queue.pk)
    assert [r["reason"] for r in reasons[waiting.pk]] == ["plan_not_active"]
    assert valid_for is not None and 0 < valid_for <= 3600
