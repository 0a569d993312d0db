"""Reads for the job and queue pages: filtered job lists, timelines, and why jobs wait.

Why a job waits is the engine's answer, asked through ``scheduler.bridge`` (one source for
the API, the pages and the simulator); the pages never compute reasons themselves.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from governance.models import Job, JobEvent, Share
from governance.models.jobs import ACTIVE_STATES
from governance.selectors import jobs as job_selectors
from governance.selectors.web_overview import RULE_WORDS

REASON_WORDS = {
    "no_limit_for_type": "no limit for this type",
    "capacity_unavailable": "the queue has too few of this type",
    "no_preemptible_victims": "nothing it may preempt frees enough",
    "own_quota_full": "its own limit is full and it cannot borrow",
    "borrow_limit_reached": "its borrow limit is reached",
    "no_lendable_capacity": "nothing idle to borrow",
}


def _bridge() -> Any | None:
    """``scheduler.bridge`` when it is installed; None before live scheduling exists."""
    try:
        return importlib.import_module("scheduler.bridge")
    except ImportError:
        return None


def explain_queue(queue_id: int) -> dict[int, list[dict[str, Any]]] | None:
    """Pending job id -> reasons per preference; None when the engine cannot be asked."""
    bridge = _bridge()
    if bridge is None or not hasattr(bridge, "explain_queue"):
        return None
    result: dict[int, list[dict[str, Any]]] = bridge.explain_queue(queue_id)
    return result


def explain_job(job: Job) -> list[dict[str, Any]] | None:
    bridge = _bridge()
    if bridge is None or not hasattr(bridge, "explain_job"):
        return None
    result: list[dict[str, Any]] = bridge.explain_job(job)
    return result


def preview_share_change(share: Share, proposed: dict[str, Any]) -> dict[str, Any] | None:
    """What a proposed share change would do (engine what-if); None when unavailable.

    A ServiceError from the bridge (invalid proposed values) propagates to the view.
    """
    bridge = _bridge()
    if bridge is None or not hasattr(bridge, "preview_share_change"):
        return None
    try:
        result: dict[str, Any] = bridge.preview_share_change(share, proposed)
    except ImportError:  # the bridge's helpers are not all there yet
        return None
    return result


def with_reason_words(reasons: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Reasons with a short label added for display (the engine's message stays as is)."""
    return [
        {**r, "label": REASON_WORDS.get(str(r.get("reason")), r.get("reason"))}
        for r in reasons or []
    ]


def filtered_jobs(
    *,
    queue: int | None = None,
    share: int | None = None,
    team: int | None = None,
    state: str | None = None,
    kind: str | None = None,
    text: str | None = None,
) -> QuerySet[Job]:
    """Jobs matching the list filters, newest first, with what a row shows joined in."""
    qs = job_selectors.jobs()
    if queue:
        qs = qs.filter(queue_id=queue)
    if share:
        qs = qs.filter(share_id=share)
    if team:
        qs = qs.filter(share__team_id=team)
    if state == "active":
        qs = qs.filter(state__in=ACTIVE_STATES)
    elif state:
        qs = qs.filter(state=state)
    if kind:
        qs = qs.filter(kind=kind)
    if text:
        qs = qs.filter(Q(name__icontains=text.strip()))
    return qs.order_by("-submitted_at", "-id")


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
