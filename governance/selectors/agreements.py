"""Reads of allocation agreements, with PostgreSQL full-text search."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import F, Prefetch, Q, QuerySet
from django.utils import timezone

from governance.models import Agreement, AgreementVersion, Promise, PromiseState, WhatIf
from governance.selectors.filters import Links

SEARCH_CONFIG = "english"


def active_promises() -> QuerySet[Promise]:
    """Promises in force, with what their pages name."""
    return (
        Promise.objects.filter(removed_in_version__isnull=True)
        .select_related("share", "team", "queue", "agreement")
        .order_by("id")
    )


def agreements() -> QuerySet[Agreement]:
    """Every agreement with its owner, editors, shares and versions loaded (no N+1)."""
    return Agreement.objects.select_related("owner").prefetch_related(
        "shares",
        "editors",
        Prefetch("promises", queryset=active_promises(), to_attr="promises_in_force"),
        Prefetch(
            "versions",
            queryset=AgreementVersion.objects.select_related("owner", "edited_by").order_by(
                "version"
            ),
        ),
    )


def evidence(agreement_id: int) -> list[WhatIf]:
    """The what-if results attached to an agreement, last attached first."""
    return list(
        WhatIf.objects.filter(agreement_id=agreement_id)
        .select_related("queue", "requested_by")
        .order_by("-attached_at", "-id")
    )


def search_agreements(
    text: str, queryset: QuerySet[Agreement] | None = None
) -> QuerySet[Agreement]:
    """Agreements matching ``text`` (web-search syntax: words, "phrases", -not, or),
    best match first. Title matches weigh most; see services.agreements."""
    query = SearchQuery(text, search_type="websearch", config=SEARCH_CONFIG)
    base = queryset if queryset is not None else agreements()
    return (
        base.filter(search_vector=query)
        .annotate(rank=SearchRank(F("search_vector"), query))
        .order_by("-rank", "title", "id")
    )


# Which jobs list (or audit trail) holds what a figure counts, by the figure's first key.
_FIGURE_LINKS = {
    "wait_to_start": ("jobs", "started", {}),
    "fallback": ("jobs", "started", {}),
    "fallback_rate": ("jobs", "started", {}),
    "plan_first_rate": ("jobs", "started", {}),
    "turnaround": ("jobs", "finished", {"state": "SUCCEEDED"}),
    "goodput": ("jobs", "finished", {"state": "SUCCEEDED"}),
    "jobs_finished": ("jobs", "finished", {}),
    "preemptions_per_finished_job": ("jobs", "finished", {}),
    "deadlines": ("jobs", "finished", {}),
    "preemptions_suffered": ("audit", "job.preempted", {}),
    "preemptions_caused": ("audit", "job.preempted", {}),
    "lost_work": ("audit", "job.preempted", {}),
    "time_to_restart": ("audit", "job.admitted", {}),
}


def promise_link(promise: Promise) -> str:
    """The jobs (or audit entries) behind the figure of the promise's last evaluation."""
    if promise.window_start is None or promise.window_stop is None:
        return ""
    links = Links(promise.queue_id, promise.window_start, promise.window_stop)
    scope: dict[str, Any] = (
        {"share": promise.share_id} if promise.share_id is not None else {"team": promise.team_id}
    )
    kind, what, extra = _FIGURE_LINKS.get(promise.figure.split(".")[0], ("jobs", "started", {}))
    if kind == "audit":
        return links.audit(scope, what)
    return links.jobs(scope, what, **extra)


def broken_promises(*, share_id: int | None = None) -> list[Promise]:
    """Promises in force whose last evaluation broke them (about ``share_id``: promises
    of the share itself, or of its team on its queue)."""
    queryset = active_promises().filter(state=PromiseState.BROKEN)
    if share_id is not None:
        from governance.models import Share

        share = Share.objects.filter(pk=share_id).values("team_id", "queue_id").first()
        if share is None:
            return []
        queryset = queryset.filter(
            Q(share_id=share_id) | Q(team_id=share["team_id"], queue_id=share["queue_id"])
        )
    return list(queryset)


def promise_history(promise_ids: list[int], *, limit: int = 60) -> dict[int, list[Any]]:
    """The last ``limit`` evaluations of each promise, oldest first."""
    from governance.models import PromiseEvaluation

    out: dict[int, list[Any]] = {pk: [] for pk in promise_ids}
    for pk in promise_ids:
        rows = list(
            PromiseEvaluation.objects.filter(promise_id=pk).order_by("-window_stop", "-id")[:limit]
        )
        out[pk] = rows[::-1]
    return out


def overdue_agreements(today: date | None = None) -> QuerySet[Agreement]:
    """Agreements whose review date has passed, the longest overdue first."""
    today = today or timezone.localdate()
    return (
        Agreement.objects.filter(review_by__lt=today)
        .select_related("owner")
        .order_by("review_by", "title")
    )


def queue_promises(queue_id: int) -> list[dict[str, Any]]:
    """The promises in force of the agreements on the queue's shares, as a what-if judges
    them on both sides (``scheduler.whatif.judge_promises``)."""
    out = []
    for p in active_promises().filter(queue_id=queue_id):
        by_share = p.share is not None
        name = p.share.name if p.share is not None else p.team.name if p.team else ""
        out.append(
            {
                "id": p.pk,
                "agreement": p.agreement_id,
                "agreement_title": p.agreement.title,
                "figure": p.figure,
                "group_by": "share" if by_share else "team",
                "name": name,
                "comparison": p.comparison,
                "threshold": p.threshold,
                "window_days": p.window_days,
            }
        )
    return out
