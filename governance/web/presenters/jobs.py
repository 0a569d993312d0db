"""Reads for the job and queue pages: filtered job lists, timelines, and why jobs wait.

Why a job waits is the engine's answer, asked through ``selectors.scheduling`` (one source
for the API, the pages and the simulator); the pages never compute reasons themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from governance.models import Job, JobEvent, JobKind, JobState
from governance.selectors import jobs as job_selectors
from governance.selectors.filters import WINDOW_FIELDS, JobFilter
from governance.web.presenters.overview import RULE_WORDS

REASON_WORDS = {
    "over_budget": "it would cost more than the job's budget",
    "deadline_unreachable": "it could no longer finish by the deadline",
    "no_limit_for_type": "no limit for this type",
    "capacity_unavailable": "the queue has too few of this type",
    "no_preemptible_victims": "nothing it may preempt frees enough",
    "own_quota_full": "its own limit is full and it cannot borrow",
    "borrow_limit_reached": "its borrow limit is reached",
    "no_lendable_capacity": "not enough free to borrow",
    "plan_not_active": "the capacity plan is not active now",
    "plan_too_small": "the capacity plan has fewer instances than asked",
    "plan_full": "the capacity plan's instances are all in use",
}


def with_reason_words(reasons: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Reasons with a short label added for display (the engine's message stays as is)."""
    return [
        {**r, "label": REASON_WORDS.get(str(r.get("reason")), r.get("reason"))}
        for r in reasons or []
    ]


# What a row of the job list shows (templates/jobs/list.html), read as plain values:
# building six model instances per row cost more than the query (``job_rows``).
LIST_COLUMNS = (
    "id",
    "name",
    "kind",
    "state",
    "priority",
    "borrowed",
    "submitted_at",
    "preemptions",
    "share_id",
    "queue__name",
    "share__name",
    "share__team__name",
    "submitter__username",
    "instance_type__name",
    "plan__name",
)


@dataclass
class JobRow:
    """One row of the job list."""

    pk: int
    name: str
    kind_label: str
    state: str
    state_label: str
    priority: int
    borrowed: int
    submitted_at: datetime
    preemptions: int
    share_id: int
    queue_name: str
    share_name: str
    team_name: str
    submitter: str
    runs_on: str  # the instance type of a job that has one and is not pending
    plan: str = ""  # the capacity plan it runs on, if any (with ``runs_on``)
    page_url: str = ""
    share_url: str = ""


def job_rows(values: Iterable[tuple[Any, ...]]) -> list[JobRow]:
    """``filtered_jobs(...)`` rows (LIST_COLUMNS tuples) as JobRow."""
    kinds, states = dict(JobKind.choices), dict(JobState.choices)
    rows = []
    for (
        pk,
        name,
        kind,
        state,
        priority,
        borrowed,
        submitted_at,
        preemptions,
        share_id,
        queue_name,
        share_name,
        team_name,
        submitter,
        instance_type,
        plan,
    ) in values:
        rows.append(
            JobRow(
                pk=pk,
                name=name,
                kind_label=str(kinds.get(kind, kind)).lower(),
                state=state,
                state_label=str(states.get(state, state)),
                priority=priority,
                borrowed=borrowed,
                submitted_at=submitted_at,
                preemptions=preemptions,
                share_id=share_id,
                queue_name=queue_name,
                share_name=share_name,
                team_name=team_name,
                submitter=submitter or "",
                runs_on=instance_type if instance_type and state != JobState.PENDING else "",
                plan=plan if plan and instance_type and state != JobState.PENDING else "",
            )
        )
    return rows


def filtered_jobs(
    *,
    queue: int | None = None,
    share: int | None = None,
    team: int | None = None,
    state: str | None = None,
    kind: str | None = None,
    text: str | None = None,
    workload: int | None = None,
    **window: datetime | None,
) -> QuerySet[Job]:
    """Jobs matching the list filters (the API's ``JobFilter``), newest first, with what
    a row shows joined in. ``window``: ``submitted_after`` ... ``finished_before``."""
    data: dict[str, Any] = {
        "queue": queue,
        "share": share,
        "team": team,
        "state": state,
        "kind": kind,
        "workload": workload,
    }
    data["q"] = text
    data.update({k: v.isoformat() for k, v in window.items() if k in WINDOW_FIELDS and v})
    given = {key: value for key, value in data.items() if value}
    return JobFilter(data=given, queryset=job_selectors.jobs()).qs.order_by("-submitted_at", "-id")


@dataclass
class TimelineItem:
    at: datetime
    type: str
    title: str
    message: str
    rule: str
    rule_words: str
    by_job: Job | None
    lost_work: float | None


TITLES = {
    "submitted": "Submitted",
    "admitted": "Admitted",
    "started": "Started",
    "claimed": "Claimed by an agent",
    "checkpoint": "Checkpoint",
    "preempted": "Preempted",
    "failed": "Failed",
    "timed_out": "Timed out",
    "completed": "Completed",
    "cancelled": "Cancelled",
    "reprioritised": "Priority changed",
    "lost": "Run lost",
    "stopped": "Run stopped",
}


def timeline(job: Job) -> list[TimelineItem]:
    """The job's events, oldest first, with rules in words and preemptors resolved.

    Expects ``job.events`` prefetched (``selectors.jobs.job_with_events``); the jobs that
    preempted it are read in one query.
    """
    events: list[JobEvent] = list(job.events.all())
    by_ids: set[int] = {
        e.data["by"]
        for e in events
        if isinstance(e.data, dict) and isinstance(e.data.get("by"), int)
    }
    by_jobs = (
        {j.pk: j for j in Job.objects.select_related("share", "share__team").filter(pk__in=by_ids)}
        if by_ids
        else {}
    )
    items: list[TimelineItem] = []
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        rule = str(data.get("rule") or data.get("reason") or "")
        lost = data.get("lost_work")
        items.append(
            TimelineItem(
                at=event.at,
                type=event.type,
                title=TITLES.get(event.type, event.type.replace("_", " ").capitalize()),
                message=event.message,
                rule=rule,
                rule_words=RULE_WORDS.get(rule, rule.replace("_", " ")),
                by_job=by_jobs.get(data["by"]) if isinstance(data.get("by"), int) else None,
                lost_work=float(lost) if isinstance(lost, int | float) else None,
            )
        )
    return items
