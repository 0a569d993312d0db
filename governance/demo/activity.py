"""Demo activity: the weather of a busy cluster, so the demo's pages have something to show.

The simulated fleet (``scheduler.executors.simulated``) runs a simulated queue's jobs for
their duration at the type's speed times ``DEMO_TIME_FACTOR`` and completes them. What the
demo adds here, when ``DEMO_ACTIVITY_SECONDS`` is set (``./scripts/run`` sets it),
is a seeded stream of what happens on a busy cluster, every change made through the
services like any other change, by the demo's own actor (``world.demo_actor``: the audit
trail and the job pages name "demo", never a person who did not act):

- the AWS worked example replays: when its queue is idle the background team submits its
  three jobs again; once background borrows, the medium team's job arrives and reclaims;
  then background's lead raises bg-low above bg-high (in-share preemption);
- the four fleet teams keep submitting work with several preferences;
- the provider takes capacity away now and then and gives it back later, so jobs are
  stopped for lost capacity and new ones fall back to their later preferences.

Each tick draws from ``random.Random(DEMO_SEED + tick number)``: the same seed and ticks
give the same activity.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from governance.demo import world
from governance.models import CapacityPlan, Job, JobQueue, JobState, QueueCapacity, Share
from governance.services import capacity, jobs
from governance.services.errors import ServiceError

log = logging.getLogger(__name__)

ACTIVE = (JobState.PENDING, JobState.RUNNING)
MAX_ACTIVE_FLEET_JOBS = 24


def _actor() -> Any:
    return world.demo_actor()


def tick(number: int | None = None) -> list[str]:
    """One step of demo activity; returns what it did, in words (also logged)."""
    interval = settings.DEMO_ACTIVITY_SECONDS
    if number is None:
        number = int(time.time() // interval) if interval > 0 else 0
    rng = random.Random(settings.DEMO_SEED + number)
    done: list[str] = []
    try:
        done += _aws_example()
        done += _fleet_work(rng)
        done += _fleet_weather(rng, number)
    except (ServiceError, JobQueue.DoesNotExist, get_user_model().DoesNotExist) as error:
        log.warning("demo activity skipped a step: %s", error)
    for line in done:
        log.info("demo activity: %s", line)
    return done


def _aws_example() -> list[str]:
    queue = JobQueue.objects.get(name=world.MARKER_QUEUE)
    shares = {s.name: s for s in Share.objects.filter(queue=queue)}
    active = {j.name: j for j in Job.objects.filter(queue=queue, state__in=ACTIVE)}
    one = [{"instance_type": "ml.g5.xlarge", "count": 1}]
    if not active:
        lead = _actor()
        for name, priority in (("bg-high", 3), ("bg-med", 2), ("bg-low", 1)):
            jobs.job_submit(
                actor=lead,
                share=shares["background"],
                name=name,
                preferences=one,
                priority=priority,
                duration=3600,
                checkpoint_interval=600,
            )
        return ["the worked example starts again: background submits bg-high, bg-med, bg-low"]
    borrowing = any(j.borrowed for j in active.values() if j.state == JobState.RUNNING)
    if borrowing and "med-1" not in active:
        jobs.job_submit(
            actor=_actor(),
            share=shares["medium"],
            name="med-1",
            preferences=one,
            priority=1,
            duration=3600,
            checkpoint_interval=600,
        )
        return ["medium submits med-1 to take back its lent instance"]
    low, high = active.get("bg-low"), active.get("bg-high")
    if (
        "med-1" in active
        and low is not None
        and high is not None
        and low.state == JobState.PENDING
        and high.state == JobState.RUNNING
        and low.priority <= high.priority
    ):
        jobs.job_reprioritise(
            actor=_actor(),
            job=low,
            priority=high.priority + 1,
            reason="Demo: bg-low became the most urgent background job.",
        )
        return [f"background's lead raises bg-low to {high.priority + 1}"]
    return []


def _fleet_work(rng: random.Random) -> list[str]:
    queue = JobQueue.objects.get(name="gpu-fleet")
    if Job.objects.filter(queue=queue, state__in=ACTIVE).count() >= MAX_ACTIVE_FLEET_JOBS:
        return []
    share = rng.choice(list(Share.objects.filter(queue=queue, enabled=True).order_by("id")))
    types = list(
        share.limits.order_by("instance_type__name").values_list("instance_type__name", flat=True)
    )
    rng.shuffle(types)
    preferences: list[dict[str, str]] = [
        {"instance_type": t} for t in types[: rng.randint(1, len(types))]
    ]
    kind = rng.choice(["sweep", "train", "eval", "finetune"])
    # Training work of a share with a capacity plan names the plan first, with the
    # on-demand types as fallbacks (docs/scheduling.md, "Capacity plans").
    plan = (
        CapacityPlan.objects.filter(share=share, start__lte=timezone.now(), end__gt=timezone.now())
        .order_by("start")
        .first()
    )
    if plan is not None and kind in ("train", "finetune"):
        preferences = [{"plan": plan.name}, *preferences]
    name = f"{share.team.name}-{kind}-{rng.randint(100, 999)}"
    jobs.job_submit(
        actor=_actor(),
        share=share,
        name=name,
        preferences=preferences,
        count=rng.choice([1, 1, 2]),
        priority=rng.randint(0, 99),
        duration=rng.choice([1800, 3600, 5400, 7200]),
        checkpoint_interval=600,
        max_pending=6 * 3600,
    )
    return [
        f"{share.team.name} submits {name} on "
        + ", ".join(str(t.get("instance_type") or f"plan {t.get('plan')}") for t in preferences)
    ]


def _fleet_weather(rng: random.Random, number: int) -> list[str]:
    """Every 8th tick the provider takes one or two instances of a type away; every 8th
    tick after that it gives the full capacity back."""
    if number % 8 not in (0, 4):
        return []
    queue = JobQueue.objects.get(name="gpu-fleet")
    current = dict(
        QueueCapacity.objects.filter(queue=queue).values_list("instance_type__name", "count")
    )
    admin = _actor()
    if number % 8 == 4 and current != world.FLEET_CAPACITY:
        capacity.queue_set_capacity(
            actor=admin,
            queue=queue,
            capacity=world.FLEET_CAPACITY,
            reason="Demo: the provider has capacity again.",
        )
        return ["the provider restores the fleet's capacity"]
    if number % 8 == 0:
        type_name = rng.choice(sorted(current))
        drop = min(current[type_name], rng.choice([1, 2]))
        if drop:
            changed = {**current, type_name: current[type_name] - drop}
            capacity.queue_set_capacity(
                actor=admin,
                queue=queue,
                capacity=changed,
                reason=f"Demo: the provider has {drop} fewer {type_name} for a while.",
            )
            return [f"the provider takes {drop} {type_name} away"]
    return []
