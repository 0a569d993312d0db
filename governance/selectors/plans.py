"""Reads of capacity plans for the API and the pages: lists, the plans a job may name,
and each plan's usage (instances its running jobs hold), kept apart from on-demand."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from governance.models import CapacityPlan, Job, JobQueue, JobState, Share
from governance.selectors.capacity import job_instances


def plans() -> QuerySet[CapacityPlan]:
    return CapacityPlan.objects.select_related("queue", "share", "share__team", "instance_type")


def nameable_plans(share: Share | int, now: datetime | None = None) -> list[CapacityPlan]:
    """The share's active and upcoming plans: what its training jobs may name."""
    return nameable_plans_of([share.pk if isinstance(share, Share) else share], now)


def nameable_plans_of(share_ids: list[int], now: datetime | None = None) -> list[CapacityPlan]:
    """``nameable_plans`` of several shares at once (the job form's choices)."""
    return list(
        plans()
        .filter(share_id__in=share_ids, end__gt=now or timezone.now())
        .order_by("share__name", "start", "name")
    )


def plan_choices(plan_list: list[CapacityPlan]) -> list[tuple[str, str]]:
    """(name, label) of each plan for a preference choice, e.g.
    "red-december: 4 x ml.p4d.24xlarge for share red, until 2026-12-15 (active)"."""
    now = timezone.now()
    seen: set[str] = set()
    out = []
    for plan in plan_list:
        if plan.name in seen:  # same name in two of the user's queues: one choice
            continue
        seen.add(plan.name)
        out.append(
            (
                plan.name,
                f"{plan.name}: {plan.count} x {plan.instance_type.name} for share "
                f"{plan.share.name}, until {plan.end:%Y-%m-%d %H:%M} UTC "
                f"({plan.state_at(now).label.lower()})",
            )
        )
    return out


def usage_by_plan(plan_ids: Iterable[int]) -> dict[int, int]:
    """Instances held by the running jobs on each plan."""
    out: dict[int, int] = defaultdict(int)
    for job in Job.objects.filter(plan_id__in=list(plan_ids), state=JobState.RUNNING).values(
        "plan_id", "preferences", "preference", "count"
    ):
        out[job["plan_id"]] += job_instances(job)
    return dict(out)


def timeline(
    plan_list: list[CapacityPlan], now: datetime, usage: dict[int, int] | None = None
) -> dict[str, Any]:
    """Layout of a plans timeline: each plan's bar as percentages of a window that spans
    the plans shown (and now), for a server-rendered chart without JavaScript.
    ``usage`` (plan id -> instances in use) is read when not given."""
    if not plan_list:
        return {"rows": [], "now_pct": None, "from": None, "to": None}
    lo = min([now, *(p.start for p in plan_list)])
    hi = max([now, *(p.end for p in plan_list)])
    span = (hi - lo).total_seconds() or 1.0
    if usage is None:
        usage = usage_by_plan(p.pk for p in plan_list)

    def pct(moment: datetime) -> float:
        return round(100 * (moment - lo).total_seconds() / span, 2)

    rows = []
    for plan in plan_list:
        used = usage.get(plan.pk, 0)
        rows.append(
            {
                "plan": plan,
                "left": pct(plan.start),
                "width": max(0.5, round(pct(plan.end) - pct(plan.start), 2)),
                "usage": used,
                "used_pct": round(100 * used / plan.count) if plan.count else 0,
                "state": plan.state_at(now).value,
            }
        )
    return {"rows": rows, "now_pct": pct(now), "from": lo, "to": hi}


# How far back the plan timelines show ended plans.
SHOW_ENDED_DAYS = 30


def queue_timeline(queue: JobQueue, now: datetime) -> dict[str, Any]:
    """One queue's plans (not ended, or ended in the last ``SHOW_ENDED_DAYS`` days) on
    its timeline (``timeline``)."""
    since = now - timedelta(days=SHOW_ENDED_DAYS)
    found = list(plans().filter(queue=queue, end__gt=since).order_by("start", "name"))
    return {"queue": queue, **timeline(found, now)}


def queue_timelines(now: datetime) -> list[dict[str, Any]]:
    """Every queue's plans (as ``queue_timeline``), one timeline per queue, queues by
    name; the usage of all of them read at once."""
    since = now - timedelta(days=SHOW_ENDED_DAYS)
    found = list(plans().filter(end__gt=since).order_by("queue__name", "start", "name"))
    usage = usage_by_plan(p.pk for p in found)
    by_queue: dict[int, list[CapacityPlan]] = {}
    for plan in found:
        by_queue.setdefault(plan.queue_id, []).append(plan)
    return [{"queue": group[0].queue, **timeline(group, now, usage)} for group in by_queue.values()]
