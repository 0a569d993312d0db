"""Writing a played history into the database, for the demo (``governance.demo.history``).

The live scheduler leaves jobs, their timeline events and audit entries behind as it
decides; a history played through the engine at demo load is written here in the same
shape, in one transaction, so Signals, the history export and what-ifs have days to
read. Every job's name starts with ``history-`` and every event and audit entry says it
is demo history.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from governance.models import (
    AuditEvent,
    DecisionRule,
    InstanceType,
    Job,
    JobEvent,
    JobQueue,
    RecoveryStatus,
    Share,
)
from governance.services import audit
from governance.services.decisions import decision_open
from governance.services.workloads import recovery_record

FINAL = {
    "completed": "SUCCEEDED",
    "failed": "FAILED",
    "timed_out": "TIMED_OUT",
    "cancelled": "CANCELLED",
}
NOTE = "Demo history, played through the engine at demo load."


@transaction.atomic
def _event_data(
    actor: Any,
    rows: dict[str, Job],
    job: Job,
    event: dict[str, Any],
    at: datetime,
    factor: float,
) -> dict[str, Any]:
    """A played event's data as the scheduler keeps it, with the audit entry it would
    have written for an admission or a preemption."""
    data: dict[str, Any] = {}
    kind = event["type"]
    if kind == "admitted":
        rule = DecisionRule.BORROW if event.get("borrowed") else DecisionRule.OWN
        data = {
            "instance_type": event["instance_type"],
            "count": event["count"],
            "preference": event.get("preference", 0),
            "borrowed": event.get("borrowed", 0),
            "rule": rule,
        }
        after = {**data, "state": "RUNNING"}
        audit.record_job(
            event_type=AuditEvent.JOB_ADMITTED, actor=actor, job=job, after=after,
            reason=NOTE, at=at,
        )  # fmt: skip
    elif kind == "preempted":
        by = rows.get(str(event.get("by"))) if event.get("by") is not None else None
        data = {
            "reason": event.get("reason"),
            "by": by.pk if by else None,
            "lost_work": round(float(event.get("lost_work") or 0) / 1000 * factor, 3),
            "counted": event.get("reason") != DecisionRule.CAPACITY_LOST,
        }
        audit.record_job(
            event_type=AuditEvent.JOB_PREEMPTED, actor=actor, job=job,
            after={**data, "rule": event.get("reason"), "by_job": data["by"]},
            reason=NOTE, at=at,
        )  # fmt: skip
    elif kind == "failed":
        data = {"reason": event.get("reason")}
    return data


def demo_history_record(
    *,
    actor: Any,
    queue: JobQueue,
    start: datetime,
    factor: float,
    jobs: list[dict[str, Any]],
    events: list[dict[str, Any]],
    submitters: dict[str, Any],
    prefix: str = "history-",
) -> int:
    """Write ``jobs`` (section-3 form, milliseconds from ``start``, work in clock
    milliseconds) and their played ``events``; work is stored as the fleet declares it
    (clock seconds x ``factor``). Returns how many jobs were written."""
    shares = {s.name: s for s in Share.objects.filter(queue=queue).select_related("team")}
    type_ids = dict(InstanceType.objects.values_list("name", "pk"))

    def moment(ms: float) -> datetime:
        return start + timedelta(milliseconds=ms)

    def work(ms: float) -> float:
        return ms / 1000 * factor

    by_job: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_job.setdefault(str(event["job"]), []).append(event)
    rows: dict[str, Job] = {}
    for raw in jobs:
        mine = by_job.get(str(raw["id"]), [])
        admitted = [e for e in mine if e["type"] == "admitted"]
        final = mine[-1] if mine and mine[-1]["type"] in FINAL else None
        last = admitted[-1] if admitted else None
        interval = raw.get("checkpoint_interval")
        rows[str(raw["id"])] = Job(
            queue=queue,
            share=shares[raw["share"]],
            name=f"{prefix}{raw['id']}",
            submitter=submitters[raw["share"]],
            priority=raw["priority"],
            preferences=raw["preferences"],
            max_pending=raw["max_pending"] // 1000 if raw.get("max_pending") else None,
            checkpoint_interval=round(work(interval)) if interval else None,
            duration=round(work(raw["duration"])),
            state=FINAL[final["type"]] if final else "CANCELLED",
            instance_type_id=type_ids.get(last["instance_type"]) if last else None,
            preference=last.get("preference") if last else None,
            borrowed=0,
            preemptions=sum(1 for e in mine if e["type"] == "preempted"),
            run=len(admitted),
            submitted_at=moment(raw["submit_at"]),
            started_at=moment(admitted[0]["at"]) if admitted else None,
            finished_at=moment(final["at"]) if final else None,
            # the workload a job is a run of, and the template entries it took
            workload_id=raw.get("workload"),
            template=raw.get("template", {}),
        )
    Job.objects.bulk_create(rows.values(), batch_size=2000)
    timeline = []
    for job in rows.values():
        timeline.append(
            JobEvent(job=job, at=job.submitted_at, type="submitted", message=NOTE, data={})
        )
    for event in events:
        job = rows[str(event["job"])]
        at = moment(event["at"])
        kind = event["type"]
        data = _event_data(actor, rows, job, event, at, factor)
        timeline.append(JobEvent(job=job, at=at, type=kind, message=NOTE, data=data))
    open_jobs = [j for j in rows.values() if j.finished_at is None]
    if open_jobs:  # never finished in the played history: closed as cancelled at its end
        end = moment(max((e["at"] for e in events), default=0) + 1)
        for job in open_jobs:
            job.finished_at = end
            timeline.append(JobEvent(job=job, at=end, type="cancelled", message=NOTE, data={}))
        Job.objects.bulk_update(open_jobs, ["finished_at"])
    JobEvent.objects.bulk_create(timeline, batch_size=5000)
    return len(rows)


def _admitted(instance_type: str, borrowed: int) -> dict[str, Any]:
    """An ``admitted`` event's data, as the scheduler writes it."""
    rule = DecisionRule.BORROW if borrowed else DecisionRule.OWN
    return {
        "instance_type": instance_type,
        "count": 1,
        "preference": 0,
        "borrowed": borrowed,
        "rule": rule,
    }


def _reclaimed() -> dict[str, Any]:
    """A ``preempted`` event's data for a reclaim (by a job the demo does not name)."""
    return {"reason": DecisionRule.RECLAIM, "by": None, "lost_work": 0, "counted": True}


def _demo_job(
    *, share: Share, submitter: Any, name: str, workload: Any, at: datetime, **fields: Any
) -> Job:
    return Job.objects.create(
        queue=share.queue,
        share=share,
        name=name,
        submitter=submitter,
        preferences=[{"instance_type": fields.pop("instance_type"), "count": 1}],
        duration=3600,
        checkpoint_interval=600,
        workload=workload,
        submitted_at=at,
        **fields,
    )


@transaction.atomic
def demo_resumed_run(
    *, actor: Any, share: Share, submitter: Any, workload: Any, instance_type: str, at: datetime
) -> Job:
    """A run of ``workload`` that was reclaimed, resumed and completed with its output
    valid (docs/workloads.md): its timeline, and the workload verified with it as
    evidence, as the live services would have left them."""
    job = _demo_job(
        share=share,
        submitter=submitter,
        name=f"{workload.name.split('/')[-1]}-resumed",
        workload=workload,
        at=at,
        instance_type=instance_type,
        state="SUCCEEDED",
        preemptions=1,
        counted_preemptions=1,
        run=2,
        output_valid=True,
        started_at=at + timedelta(minutes=2),
        finished_at=at + timedelta(minutes=90),
        work_done=3600,
        checkpoint_work=3600,
    )
    steps = [
        (0, "submitted", NOTE, {}),
        (2, "admitted", "Borrowed idle capacity. " + NOTE, _admitted(instance_type, 1)),
        (30, "preempted", "Reclaimed by its owner. " + NOTE, _reclaimed()),
        (40, "admitted", "Resumed from its checkpoint. " + NOTE, _admitted(instance_type, 0)),
        (90, "completed", "Output valid. " + NOTE, {}),
    ]
    JobEvent.objects.bulk_create(
        JobEvent(job=job, at=at + timedelta(minutes=m), type=t, message=msg, data=data)
        for m, t, msg, data in steps
    )
    recovery_record(
        workload=workload,
        after=RecoveryStatus.VERIFIED,
        job=job,
        note="The resumed run completed; its output was valid. " + NOTE,
        actor=actor,
        at=job.finished_at,
    )
    return job


@transaction.atomic
def demo_exhausted_run(
    *, share: Share, submitter: Any, workload: Any, instance_type: str, at: datetime
) -> Job:
    """A run of ``workload`` failed by its share's preemption retry limit, with the
    decision that opens for its team's leads (docs/workloads.md#decisions)."""
    retries = share.preemption_retries or 0
    job = _demo_job(
        share=share,
        submitter=submitter,
        name=f"{workload.name.split('/')[-1]}-exhausted",
        workload=workload,
        at=at,
        instance_type=instance_type,
        state="FAILED",
        preemptions=retries + 1,
        counted_preemptions=retries + 1,
        run=retries + 1,
        started_at=at + timedelta(minutes=1),
        finished_at=at + timedelta(minutes=10 * (retries + 1)),
    )
    timeline = [JobEvent(job=job, at=at, type="submitted", message=NOTE, data={})]
    for n in range(retries + 1):
        start = at + timedelta(minutes=1 + 10 * n)
        timeline.append(
            JobEvent(
                job=job, at=start, type="admitted", message=NOTE, data=_admitted(instance_type, 1)
            )
        )
        timeline.append(
            JobEvent(
                job=job,
                at=start + timedelta(minutes=9),
                type="preempted",
                message="Reclaimed by its owner. " + NOTE,
                data=_reclaimed(),
            )
        )
    assert job.finished_at is not None
    message = f"Failed: preempted {job.preemptions} times, more than the share's retry limit."
    timeline.append(
        JobEvent(
            job=job,
            at=job.finished_at,
            type="failed",
            message=message,
            data={"reason": DecisionRule.RETRIES_EXHAUSTED},
        )
    )
    JobEvent.objects.bulk_create(timeline)
    decision_open(job=job, now=job.finished_at)
    return job
