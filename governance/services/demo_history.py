"""Writing a played history into the database, for the demo (``governance.demo_history``).

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

from governance.models import AuditEvent, DecisionRule, InstanceType, Job, JobEvent, JobQueue, Share
from governance.services import audit

FINAL = {
    "completed": "SUCCEEDED",
    "failed": "FAILED",
    "timed_out": "TIMED_OUT",
    "cancelled": "CANCELLED",
}
NOTE = "Demo history, played through the engine at demo load."


@transaction.atomic
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
        data: dict[str, Any] = {}
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
                "lost_work": round(work(float(event.get("lost_work") or 0)), 3),
                "counted": event.get("reason") != DecisionRule.CAPACITY_LOST,
            }
            audit.record_job(
                event_type=AuditEvent.JOB_PREEMPTED, actor=actor, job=job,
                after={**data, "rule": event.get("reason"), "by_job": data["by"]},
                reason=NOTE, at=at,
            )  # fmt: skip
        elif kind == "failed":
            data = {"reason": event.get("reason")}
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
