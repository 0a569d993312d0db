"""The demo's activity goes through the services and is the same for the same seed."""

from pathlib import Path

import pytest
from django.db import transaction

from governance import demo
from governance.demo import activity as simulated
from governance.models import AuditEntry, Job, JobQueue, QueueCapacity


def _fleet_capacity() -> dict[str, int]:
    queue = JobQueue.objects.get(name="gpu-fleet")
    return dict(
        QueueCapacity.objects.filter(queue=queue).values_list("instance_type__name", "count")
    )


@pytest.mark.django_db
def test_ticks_submit_work_and_move_capacity_through_the_services(
    tmp_path: Path, settings: object
) -> None:
    demo.load(tmp_path)
    before_jobs = Job.objects.count()
    did = simulated.tick(0)  # tick 0: work arrives and the provider takes capacity away
    assert any("takes" in line for line in did)
    assert _fleet_capacity() != demo.FLEET_CAPACITY
    assert Job.objects.count() > before_jobs
    dropped = AuditEntry.objects.filter(event_type="queue.capacity_changed").latest("id")
    assert dropped.reason.startswith("Demo: the provider has")
    simulated.tick(4)  # tick 4: capacity comes back
    assert _fleet_capacity() == demo.FLEET_CAPACITY


@pytest.mark.django_db
def test_the_same_seed_gives_the_same_activity(tmp_path: Path) -> None:
    demo.load(tmp_path)
    with transaction.atomic():
        first = simulated.tick(3)
        transaction.set_rollback(True)  # back to the same world
    assert first
    assert simulated.tick(3) == first


@pytest.mark.django_db
def test_vision_training_work_names_its_plan_first(tmp_path: Path) -> None:
    """The fleet's moving weather: training work of the share with a capacity plan (the
    demo's vision) names the plan first and keeps on-demand types as fallbacks."""
    import random

    demo.load(tmp_path)
    found = []
    for seed in range(200):
        with transaction.atomic():
            simulated._fleet_work(random.Random(seed))
            job = Job.objects.latest("id")
            if job.share.team.name == "vision" and (
                "-train-" in job.name or "-finetune-" in job.name
            ):
                found.append(job.preferences)
            transaction.set_rollback(True)
        if len(found) >= 3:
            break
    assert found
    for preferences in found:
        assert preferences[0]["plan"] == demo.DEMO_PLAN
        assert all("instance_type" in p for p in preferences[1:]) and len(preferences) > 1


@pytest.mark.django_db
def test_demo_activity_is_recorded_under_the_demo_actor_only(tmp_path: Path) -> None:
    """Issue 13: the demo's moves never appear under a real user's name."""
    demo.load(tmp_path)
    first_new = AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0
    for number in (0, 1, 2, 3, 4):
        simulated.tick(number)
    entries = AuditEntry.objects.filter(id__gt=first_new).exclude(actor=None)
    assert entries.exists()
    assert set(entries.values_list("actor__username", flat=True)) == {demo.DEMO_ACTOR}
    assert set(Job.objects.values_list("submitter__username", flat=True)) == {demo.DEMO_ACTOR}
