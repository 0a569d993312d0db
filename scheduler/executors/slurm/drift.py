"""The drift guard and the capacity Slurm's nodes give, both in the cycle's transaction
before the cycle reads the queue: jobs on the queue's partitions beyond what the product
admitted are recorded (and cancelled after the commit unless the queue only reports),
and each type's capacity is read from the usable nodes less the GPUs such jobs hold, so
a node going down reaches the engine as lost capacity before anything is admitted.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import Any

from governance.models import QueueCapacity, SlurmRun, SlurmRunState, SlurmTypeConfig
from governance.services import runs
from governance.services import slurm as slurm_services
from governance.services.errors import ServiceError
from scheduler.executors.slurm.cli import Cli, SlurmError, node_gpus, node_usable
from scheduler.executors.slurm.read import Seen
from scheduler.executors.slurm.report import end_run
from scheduler.executors.slurm.result import SyncResult

log = logging.getLogger(__name__)

# Slurm states of a job that holds, or waits for, resources of the governed partitions.
DRIFT_STATES = frozenset(
    {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "REQUEUED", "RESIZING"}
)
HOLDING_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING"})


def type_mappings(queue_id: int) -> list[SlurmTypeConfig]:
    return list(SlurmTypeConfig.objects.filter(queue_id=queue_id).select_related("instance_type"))


def drift_guard(
    queue_id: int, seen: Seen, result: SyncResult, mappings: list[SlurmTypeConfig]
) -> dict[str, int]:
    """The drift guard, in the cycle's transaction before the capacity it gives: compare
    what Slurm runs on the queue's partitions with what the product admitted. A job the
    product did not submit, or a product job whose allocation exceeds its admission (more
    GPUs or nodes than its instances, an array, exclusive nodes), is recorded once
    (``slurm_services.slurm_drift_found``: audited, shown, told to admins) and cancelled
    after the commit unless the queue only reports; a product run found so fails, as
    its job no longer runs as admitted. Returns the GPUs such jobs hold, by type name."""
    by_partition: dict[str, SlurmTypeConfig] = {}
    for mapping in mappings:
        for partition in mapping.partition.split(","):
            if partition:
                by_partition.setdefault(partition, mapping)
    live = [
        j
        for j in seen.slurm.by_id.values()
        if j.get("job_state") in DRIFT_STATES
        and set(str(j.get("partition", "")).split(",")) & set(by_partition)
    ]
    runs_by_id = {r.slurm_job_id: r for r in seen.active if r.slurm_job_id}
    unsure = [j["job_id"] for j in live if j["job_id"] not in runs_by_id]
    if unsure:  # the product's, ended or of another queue: not drift, unless exceeding
        for other in SlurmRun.objects.filter(slurm_job_id__in=unsure).select_related("job"):
            runs_by_id.setdefault(other.slurm_job_id or 0, other)
    lost_answers = {r.name: r for r in seen.active if r.slurm_job_id is None}
    by_type = {m.instance_type_id: m for m in mappings}
    held: dict[str, int] = {}
    found: list[tuple[dict[str, Any], SlurmRun | None, list[str], int]] = []
    for job in live:
        slurm_run = runs_by_id.get(job["job_id"])
        gpus = int(job.get("gpus") or 0)
        if slurm_run is None:
            waiting = lost_answers.get(str(job.get("name")))
            if waiting is not None and job.get("user") == waiting.unix_user:
                continue  # a submission whose answer was lost: found again by its name
            kinds, excess = ["unknown"], gpus
        else:
            if slurm_run.state in (SlurmRunState.ENDED, SlurmRunState.STOPPING):
                continue  # being stopped, or its end confirmed: it goes
            if slurm_run.job.queue_id != queue_id:
                continue  # another queue's, on a partition both map: its own pass looks
            kinds, excess = beyond(slurm_run, job, by_type)
        if not kinds:
            continue
        found.append((job, slurm_run, kinds, excess))
        if job.get("job_state") in HOLDING_STATES and excess:
            mapping = by_partition[str(job["partition"]).split(",")[0]]
            held[mapping.instance_type.name] = held.get(mapping.instance_type.name, 0) + excess
    report_only = seen.config.drift_report_only
    for job, slurm_run, kinds, _ in found:
        result.drift.append(job["job_id"])
        if not report_only:
            result.drift_cancels.append(job["job_id"])
        if slurm_run is not None and not report_only:
            end_beyond(slurm_run, job, kinds, seen.now, result)
    slurm_services.slurm_drift_found(
        queue_id=queue_id,
        found=[(job, slurm_run, kinds) for job, slurm_run, kinds, _ in found],
        report_only=report_only,
        now=seen.now,
    )
    return held


def beyond(
    slurm_run: SlurmRun, job: dict[str, Any], by_type: dict[int, SlurmTypeConfig]
) -> tuple[list[str], int]:
    """What a product job's Slurm allocation holds beyond its admission, and the GPUs
    beyond it."""
    product_job = slurm_run.job
    count = int(product_job.preferences[product_job.preference or 0]["count"])
    mapping = by_type.get(product_job.instance_type_id or 0)
    per = mapping.gpus_per_instance if mapping is not None else 0
    gpus = int(job.get("gpus") or 0)
    kinds = []
    if gpus > count * per:
        kinds.append("gpus")
    if int(job.get("nodes") or 0) > count:
        kinds.append("nodes")
    if job.get("array"):
        kinds.append("array")
    if job.get("exclusive"):
        kinds.append("exclusive")
    return kinds, max(0, gpus - count * per) if kinds else 0


def end_beyond(
    slurm_run: SlurmRun, job: dict[str, Any], kinds: list[str], now: datetime, result: SyncResult
) -> None:
    """A product run whose Slurm job exceeds its admission fails: the job was changed
    behind the product's back (the drift guard cancels it after the commit)."""
    sid = job["job_id"]
    try:
        runs.run_fail(
            actor=None,
            job_id=slurm_run.job_id,
            run=slurm_run.run,
            now=now,
            message=(
                f"Slurm job {sid} holds more than the product admitted "
                f"({', '.join(kinds)}): the drift guard cancelled it "
                "(docs/slurm.md#security-model)."
            ),
        )
    except ServiceError as exc:
        log.info("drift of %s: the run's end was refused: %s", slurm_run.name, exc)
        return
    end_run(slurm_run, "CANCELLED", None, now)
    result.failed += 1


def cancel_drift(cli: Cli, result: SyncResult) -> None:
    """Cancel the jobs the drift guard found, once what it found is committed."""
    for sid in result.drift_cancels:
        try:
            cli.cancel(sid)
        except SlurmError as exc:  # the next pass finds it again
            result.errors.append(str(exc))


def observe_capacity(
    queue_id: int,
    nodes: list[dict[str, Any]],
    now: datetime,
    held: dict[str, int] | None = None,
    mappings: list[SlurmTypeConfig] | None = None,
) -> dict[str, int] | None:
    """Each mapped type's capacity from the usable nodes of its partition/feature, less
    the GPUs jobs beyond the product's admissions hold there (``held``, by type name:
    capacity the product cannot use, never booked twice)."""
    held = held or {}
    capacity: dict[str, int] = {}
    unusable: set[str] = set()
    for mapping in type_mappings(queue_id) if mappings is None else mappings:
        count = 0
        for node in nodes:
            partitions = node.get("partitions") or []
            features = str(node.get("active_features") or node.get("features") or "").split(",")
            if mapping.partition and not set(mapping.partition.split(",")) & set(partitions):
                continue
            if mapping.feature and mapping.feature not in features:
                continue
            if not node_usable(node):
                unusable.add(f"{node.get('name')} ({str(node.get('state', '')).lower()})")
                continue
            if mapping.gpus_per_instance:
                count += node_gpus(node, mapping.gres_name) // mapping.gpus_per_instance
            else:
                count += 1
        taken = held.get(mapping.instance_type.name, 0)
        if taken and mapping.gpus_per_instance:
            count = max(0, count - math.ceil(taken / mapping.gpus_per_instance))
        capacity[mapping.instance_type.name] = count
    if not capacity:
        return None
    stored = dict(
        QueueCapacity.objects.filter(
            queue_id=queue_id, instance_type__name__in=list(capacity)
        ).values_list("instance_type__name", "count")
    )
    if stored == capacity:
        return None  # the usual pass: nothing to lock or write
    nodes_text = ", ".join(sorted(unusable)) if unusable else "none"
    held_text = ", ".join(f"{gpus} GPUs of {name}" for name, gpus in sorted(held.items()))
    return slurm_services.queue_capacity_observed(
        queue_id=queue_id,
        capacity=capacity,
        now=now,
        explanation=f"Capacity as Slurm reports it; unusable nodes: {nodes_text}"
        + (f"; held by jobs beyond the product's admissions: {held_text}." if held else "."),
    )
