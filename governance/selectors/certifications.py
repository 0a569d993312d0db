"""Reads of certified configurations (docs/workloads.md#certified-configurations) for the
API and the pages: a workload's configurations side by side with their benchmark, the
cost of a run at the type's price, and how the runs on each compare (drift)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from governance.models import (
    CapacityPlan,
    Certification,
    CertificationState,
    InstanceType,
    Job,
    JobEvent,
    JobState,
    PreferenceTemplate,
)
from governance.models.certifications import ConfigurationKey, key_text, preference_key
from scheduler.engine.drift import drift, nearest_rank

Key = ConfigurationKey


def certifications() -> QuerySet[Certification]:
    return Certification.objects.select_related(
        "workload__team", "instance_type", "plan", "proposed_by", "decided_by", "revoked_by"
    )


def of_workload(workload_id: int) -> list[Certification]:
    return list(certifications().filter(workload_id=workload_id).order_by("proposed_at", "id"))


@dataclass(frozen=True)
class Run:
    """One completed run of a workload's job: where, how long (last admission to
    completion, seconds), and when it ended."""

    job_id: int
    key: Key
    seconds: float
    finished_at: datetime
    preference: int | None


def completed_runs(workload_id: int) -> list[Run]:
    """The workload's completed runs, each on the configuration of its last admission.

    One query reads each run's last admission (``DISTINCT ON`` the job, newest first):
    not every admission of every run, nor the runs' ids sent back as parameters (a
    workload with thousands of runs made its page spend more on that than on the rest)."""
    last = (
        JobEvent.objects.filter(
            job__workload_id=workload_id,
            job__state=JobState.SUCCEEDED,
            job__finished_at__isnull=False,
            type="admitted",
        )
        .order_by("job_id", "-at", "-id")
        .distinct("job_id")
        .values_list("job_id", "at", "data", "job__finished_at")
    )
    runs = []
    for job_id, at, raw, end in last:
        if end is None:  # pragma: no cover - filtered above
            continue
        data: dict[str, Any] = raw or {}
        plan = data.get("plan")
        key: Key = (
            ("plan", str(plan), int(data.get("count") or 0))
            if plan
            else ("type", str(data.get("instance_type")), int(data.get("count") or 0))
        )
        runs.append(
            Run(job_id, key, max(0.0, (end - at).total_seconds()), end, data.get("preference"))
        )
    return sorted(runs, key=lambda r: (r.finished_at, r.job_id))


def runs_of(cert: Certification, runs: list[Run]) -> list[Run]:
    """The runs that count for a certification's drift: on its configuration, completed
    since it was certified."""
    if cert.decided_at is None or cert.state == CertificationState.PROPOSED:
        return []
    key = cert.key
    return [r for r in runs if r.key == key and r.finished_at >= cert.decided_at]


def drift_of(cert: Certification, runs: list[Run]) -> dict[str, Any]:
    """``{p50, p90, runs, drifting}`` of a certified configuration's runs."""
    return drift([r.seconds for r in runs_of(cert, runs)], float(cert.runtime))


def _prices() -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    types = dict(InstanceType.objects.values_list("name", "hourly_price"))
    plans = dict(CapacityPlan.objects.values_list("name", "hourly_price"))
    return types, plans


def run_cost(
    key: Key, seconds: float, prices: tuple[dict[str, Decimal], dict[str, Decimal]]
) -> Decimal | None:
    """A run's cost: count x hourly price (the type's, or the plan's) x hours."""
    kind, name, count = key
    price = (prices[1] if kind == "plan" else prices[0]).get(name)
    if price is None:
        return None
    return (Decimal(count) * price * Decimal(str(seconds)) / Decimal(3600)).quantize(
        Decimal("0.01")
    )


@dataclass
class ConfigurationRow:
    """One row of the workload page's side-by-side table."""

    key: Key
    configuration: str
    certification: Certification | None
    status: str
    benchmark_cost: Decimal | None = None
    drift: dict[str, Any] = field(default_factory=dict)
    runs: int = 0
    runtime_p50: float | None = None
    cost_p50: Decimal | None = None


def configurations(workload_id: int, *, now: datetime | None = None) -> list[ConfigurationRow]:
    """The workload's configurations side by side: every certification (newest per
    configuration first) with its benchmark, the cost of its reference run, its status
    and drift; then configurations its runs were chosen on that have no certification.
    Each row carries the runs chosen on it: how many, p50 run time and p50 cost."""
    now = now or timezone.now()
    prices = _prices()
    runs = completed_runs(workload_id)
    by_key: dict[Key, list[Run]] = defaultdict(list)
    for run in runs:
        by_key[run.key].append(run)
    rows: list[ConfigurationRow] = []
    seen: set[Key] = set()
    for cert in of_workload(workload_id):
        key = cert.key
        seen.add(key)
        rows.append(
            ConfigurationRow(
                key=key,
                configuration=key_text(key),
                certification=cert,
                status=cert.status(now),
                benchmark_cost=run_cost(key, cert.runtime, prices),
                drift=drift_of(cert, runs) if cert.state != CertificationState.PROPOSED else {},
            )
        )
    for key in by_key:
        if key not in seen:
            rows.append(
                ConfigurationRow(
                    key=key, configuration=key_text(key), certification=None, status="not certified"
                )
            )
    for row in rows:
        chosen = sorted(r.seconds for r in by_key.get(row.key, []))
        row.runs = len(chosen)
        row.runtime_p50 = nearest_rank(chosen, 50)
        row.cost_p50 = (
            run_cost(row.key, row.runtime_p50, prices) if row.runtime_p50 is not None else None
        )
    return rows


def template_of(workload_id: int) -> PreferenceTemplate | None:
    return (
        PreferenceTemplate.objects.filter(workload_id=workload_id)
        .prefetch_related("entries__certification__instance_type", "entries__certification__plan")
        .first()
    )


def template_entry_of(job: Job) -> dict[str, Any] | None:
    """The template entry the job's current (or last) run was chosen from, with the
    reason for its place; None when the job did not take a template or never ran."""
    entries = (job.template or {}).get("entries") or []
    if job.preference is None or job.preference >= len(entries):
        return None
    entry = dict(entries[job.preference])
    entry["preference"] = job.preference
    return entry


def uncertified_active(share_id: int, now: datetime | None = None) -> list[dict[str, Any]]:
    """The share's pending and running jobs that a certified-only share would refuse at
    submission now, with why: for the share editor's preview of turning it on."""
    from governance.models.jobs import ACTIVE_STATES

    now = now or timezone.now()
    in_force: dict[int, set[Key]] = {}
    out = []
    for job in (
        Job.objects.filter(share_id=share_id, state__in=ACTIVE_STATES)
        .select_related("workload")
        .order_by("submitted_at", "id")
    ):
        if job.workload_id is None:
            out.append({"job": job.pk, "name": job.name, "why": "names no workload"})
            continue
        if job.workload_id not in in_force:
            in_force[job.workload_id] = {
                c.key
                for c in certifications().filter(
                    workload_id=job.workload_id, state=CertificationState.CERTIFIED
                )
                if c.in_force(now)
            }
        missing = [
            key_text(preference_key(pref))
            for pref in job.preferences
            if preference_key(pref) not in in_force[job.workload_id]
        ]
        if missing and job.workload is not None:
            why = f"{', '.join(missing)} not certified for {job.workload.name}"
            out.append({"job": job.pk, "name": job.name, "why": why})
    return out
