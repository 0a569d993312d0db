"""A few days of history for the demo's fleet queue, played through the engine at demo
load (``manage.py load_demo``), so Signals, the history export and what-ifs have
something worth reading. The jobs are marked as demo history (names ``history-...``).

The arrivals are seeded (the same demo every time) and keep the fleet busy around its
capacity: waits, borrowing, reclaims and in-share preemptions all happen. Times are the
clock's; the work a job declares is its clock time x ``DEMO_TIME_FACTOR``, as the
simulated fleet would have done it, so the history export replays it on the clock.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from governance.demo.records import demo_history_record
from governance.models import Job, JobQueue, Membership, Share
from governance.selectors import scheduling
from governance.services.insight import usage_rebuild
from governance.services.promises import promises_evaluate
from governance.services.shares import limits_map

QUEUE = "gpu-fleet"
MS = 1000  # played in milliseconds, as the live scheduler counts: the export replays it
DAYS = 3
JOBS_PER_DAY = 240
REBUILD_WINDOW = timedelta(days=DAYS + 1)


def already_loaded() -> bool:
    return Job.objects.filter(queue__name=QUEUE, name__startswith="history-").exists()


def scenario(queue: JobQueue, *, days: int = DAYS, seed: int = 12) -> dict[str, Any]:
    """The played scenario (milliseconds from 0): the queue's shares, capacity and
    speeds as they are."""
    rng = random.Random(seed)
    shares = list(Share.objects.filter(queue=queue).order_by("name"))
    capacity = dict(queue.capacities.values_list("instance_type__name", "count"))
    speeds = dict(queue.capacities.values_list("instance_type__name", "instance_type__speed"))
    types = sorted(capacity)
    jobs: list[dict[str, Any]] = []
    span = days * 86400
    for i in range(days * JOBS_PER_DAY):
        share = rng.choice(shares)
        own = limits_map(share)
        first = rng.choice(sorted(t for t, n in own.items() if n > 0))
        others = [t for t in rng.sample(types, 2) if t != first][: rng.randint(0, 1)]
        options = [first, *others]
        count = rng.choice([1, 1, 1, 2, 2, 4])
        count = max(1, min(count, own[first], capacity[first]))  # it can always run
        jobs.append(
            {
                "id": str(i),
                "share": share.name,
                "submit_at": int(rng.uniform(0, span)) * MS,
                "priority": rng.choice([10, 20, 50, 120, 200, 450]),
                "preferences": [
                    {"instance_type": t, "count": min(count, capacity[t])} for t in options
                ],
                "duration": rng.choice([900, 1800, 3600, 3600, 7200, 10800]) * MS,
                "checkpoint_interval": rng.choice([None, 600 * MS, 1800 * MS]),
                "max_pending": rng.choice([None, None, None, 7200 * MS]),
            }
        )
    jobs.sort(key=lambda j: (int(j["submit_at"]), int(j["id"])))
    return {
        "time_unit": "ms",
        "instance_types": [
            {"name": t, "capacity": capacity[t], "speed": float(speeds[t])} for t in types
        ],
        "shares": [
            {
                "name": s.name,
                "policy": s.policy,
                "borrow_limit": -1 if s.borrow_limit is None else s.borrow_limit,
                "limits": limits_map(s),
                "in_share_preemption": s.in_share_preemption,
                "preemption_retries": s.preemption_retries,
            }
            for s in shares
        ],
        "jobs": jobs,
    }


def load_history(*, now: datetime | None = None, days: int = DAYS) -> int:
    """Play and write the history, ending a quarter of an hour before ``now``; returns
    how many jobs it wrote (0 when already there or without the demo queue)."""
    queue = JobQueue.objects.filter(name=QUEUE).first()
    if queue is None or already_loaded():
        return 0
    data = scenario(queue, days=days)
    events = scheduling.replay(data)["events"]
    last = max((e["at"] for e in events), default=0)
    end = (now or timezone.now()).replace(microsecond=0)
    start = end - timedelta(milliseconds=last + 900 * MS)
    leads = {
        s.name: Membership.objects.filter(team=s.team).order_by("role").first()
        for s in Share.objects.filter(queue=queue).select_related("team")
    }
    submitters = {name: m.user for name, m in leads.items() if m is not None}
    return demo_history_record(
        actor=None,
        queue=queue,
        start=start,
        factor=float(settings.DEMO_TIME_FACTOR),
        jobs=data["jobs"],
        events=events,
        submitters=submitters,
    )


def load_history_and_rollups(*, now: datetime | None = None) -> int:
    """``load_history``, then the usage rollups of every queue rebuilt over the played days
    from their recorded events: the usage history charts read rollups the live cycle
    writes, so without this they would start empty; and the agreements' promises
    evaluated on it (one kept, one broken: ``world._agreements``). Returns how many jobs
    were written."""
    written = load_history(now=now)
    if written:
        now = now or timezone.now()
        for queue_id in JobQueue.objects.values_list("pk", flat=True):
            usage_rebuild(queue_id=queue_id, since=now - REBUILD_WINDOW, until=now)
        promises_evaluate(stop=now)
    return written
