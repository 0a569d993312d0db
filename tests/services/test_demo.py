"""The demo loads through the services, once, and shows every exception state."""

from pathlib import Path

import pytest

from governance import demo
from governance.models import AuditEntry, ExceptionState, JobQueue, PriorityException, Share


@pytest.mark.django_db
def test_demo_loads_once_with_every_exception_state(tmp_path: Path) -> None:
    logins = demo.load(tmp_path)
    assert demo.already_loaded()
    assert (tmp_path / "demo_logins.txt").read_text().splitlines() == logins
    aws = JobQueue.objects.get(name="aws-worked-example")
    policies = dict(Share.objects.filter(queue=aws).values_list("name", "policy"))
    assert policies == {"background": "LEND_AND_BORROW", "medium": "LEND", "protected": "RESERVE"}
    assert Share.objects.get(queue=aws, name="background").borrow_limit == 200
    states = set(PriorityException.objects.values_list("state", flat=True))
    assert states == set(ExceptionState.values)
    # Every write went through a service, so every created object has its audit entry.
    assert AuditEntry.objects.filter(event_type="share.created").count() == Share.objects.count()


@pytest.mark.django_db
def test_demo_plan_is_active_and_named_first_by_training_jobs(tmp_path: Path) -> None:
    """The demo's plan: vision's, on the fleet's most contended type, active now; vision's
    training jobs name it first, and the scheduler starts them on it."""
    from django.utils import timezone

    from governance.models import CapacityPlan, Job, JobState, PlanState, ShareLimit
    from scheduler import bridge

    demo.load(tmp_path)
    plan = CapacityPlan.objects.get(name=demo.DEMO_PLAN)
    assert plan.state_at(timezone.now()) is PlanState.ACTIVE
    assert plan.share.team.name == "vision"
    # Most contended in the fleet: the shares' limits on it add up to its whole capacity.
    fleet = plan.queue
    capacity = fleet.capacities.get(instance_type=plan.instance_type).count
    limits = sum(
        ShareLimit.objects.filter(share__queue=fleet, instance_type=plan.instance_type).values_list(
            "count", flat=True
        )
    )
    assert limits >= capacity
    first = [j for j in Job.objects.filter(share=plan.share) if j.preferences[0].get("plan")]
    assert {j.kind for j in first} == {"training"}
    assert len(first) >= 2
    bridge.run_cycle(fleet.pk)
    on_plan = Job.objects.filter(plan=plan, state=JobState.RUNNING)
    assert on_plan.exists()
