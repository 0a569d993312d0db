"""Signals answers of closed windows, stored and reused (docs/signals.md#stored-answers).

A window's signals read the queue's whole recording up to the window's end, so once the
window has ended they can change only when something is recorded late: an executor
reporting an event at a past time, a job or an audit entry written with a past time, or
a change to the shares, teams, types or capacity plans the answer names and prices. The
store keeps the answer of each (queue, window, grouping) with the newest job-event, job
and audit-entry ids at the time it was computed and a digest of the queue's shares,
types and plans; it is reused while no newer row falls before the window's end and the
digest is unchanged, and recomputed (and stored again) otherwise. The check is three
index range scans and three small reads, whatever the size of the queue.

A window counts as closed once its end is ``SETTLE`` in the past: an event is written
moments after the time it records, and a transaction still open when the answer was
computed could commit a row with an older id; the margin keeps both out of reach.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, Q

from governance.models import (
    AuditEntry,
    CapacityPlan,
    Certification,
    InstanceType,
    Job,
    JobEvent,
    JobQueue,
    Share,
    SignalAnswer,
)
from scheduler import history, promises

SETTLE = timedelta(minutes=5)


def is_closed(stop: datetime, now: datetime) -> bool:
    """Whether a window ending at ``stop`` has ended long enough ago to be stored."""
    return stop <= now - SETTLE


def _newest() -> tuple[int, int, int]:
    """The newest job-event, job and audit-entry ids (each one primary-key index probe)."""

    def newest(model: Any) -> int:
        return int(model.objects.aggregate(newest=Max("id"))["newest"] or 0)

    return newest(JobEvent), newest(Job), newest(AuditEntry)


def shape(queue: JobQueue) -> str:
    """A digest of what an answer names and prices by: the queue's shares with their
    teams, every instance type's name, speed and price, the queue's capacity plans, and
    the certifications of its teams' workloads, and the paths of the figures the signals
    compute."""
    shares = list(
        Share.objects.filter(queue=queue).order_by("id").values_list("id", "name", "team__name")
    )
    types = [
        [name, float(speed), float(price), bool(accelerated)]
        for name, speed, price, accelerated in InstanceType.objects.order_by("name").values_list(
            "name", "speed", "hourly_price", "accelerated"
        )
    ]
    # a plan may be created with a start in the past, inside a closed window
    plans = list(
        CapacityPlan.objects.filter(queue=queue)
        .order_by("id")
        .values_list("id", "name", "start", "end", "count", "hourly_price")
    )
    # certification_drift prices runs by the certified run times of the teams' workloads
    certified = list(
        Certification.objects.filter(workload__team__shares__queue=queue)
        .order_by("id")
        .values_list("id", "state", "runtime")
        .distinct()
    )
    # the figures the code computes: an answer stored before the signals gained a figure
    # is computed again
    figures = promises.figure_paths()
    text = json.dumps([shares, types, plans, certified, figures], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def is_stale(row: SignalAnswer, digest: str) -> bool:
    """Whether anything recorded after ``row`` was computed falls before its window's end,
    or the queue's shares or types changed."""
    if row.shape != digest:
        return True
    queue_id, stop = row.queue_id, row.stop
    late_event = JobEvent.objects.filter(pk__gt=row.last_event, at__lt=stop, job__queue_id=queue_id)
    late_job = Job.objects.filter(pk__gt=row.last_job, queue_id=queue_id, submitted_at__lt=stop)
    late_audit = AuditEntry.objects.filter(pk__gt=row.last_audit, created_at__lt=stop).filter(
        Q(queue_id=queue_id) | Q(share__queue_id=queue_id) | Q(job__queue_id=queue_id)
    )
    return late_event.exists() or late_job.exists() or late_audit.exists()


def window_signals(
    queue: JobQueue, start: datetime, stop: datetime, *, now: datetime, group_by: str = "share"
) -> dict[str, Any]:
    """``history.window_signals``, from the store when the window is closed and its stored
    answer is not stale; a closed window's fresh answer is stored. The answer is the same
    either way (as JSON gives it back)."""
    if not is_closed(stop, now):
        return history.window_signals(queue, start, stop, now=now, group_by=group_by)
    digest = shape(queue)
    row = SignalAnswer.objects.filter(
        queue=queue, start=start, stop=stop, group_by=group_by
    ).first()
    if row is not None and not is_stale(row, digest):
        answer: dict[str, Any] = row.answer
        return answer
    # read before computing: a row written meanwhile is newer and is checked next time
    last_event, last_job, last_audit = _newest()
    answer = json.loads(
        json.dumps(history.window_signals(queue, start, stop, now=now, group_by=group_by))
    )
    SignalAnswer.objects.bulk_create(
        [
            SignalAnswer(
                queue=queue,
                start=start,
                stop=stop,
                group_by=group_by,
                last_event=last_event,
                last_job=last_job,
                last_audit=last_audit,
                shape=digest,
                answer=answer,
                computed_at=now,
            )
        ],
        update_conflicts=True,
        unique_fields=["queue", "start", "stop", "group_by"],
        update_fields=[
            "last_event",
            "last_job",
            "last_audit",
            "shape",
            "answer",
            "computed_at",
        ],
    )
    return answer
