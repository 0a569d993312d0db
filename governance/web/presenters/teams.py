"""Reads for the team view: a team's shares with their usage now, its pending jobs in the
cycle's order (with their starts as things are and on the entitlement alone), its runs
on borrowed capacity with their exposure, its exceptions, and a one-line summary of
every other team.

The usage figures are the pages' own (``selectors.capacity.queues_usage``, built on the
one accounting function), cached under the stored state like the overview's; why jobs
wait and when they may start come from ``selectors.scheduling`` (cached per queue).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from governance.models import (
    ChangeRequestState,
    ExceptionState,
    Job,
    JobQueue,
    JobState,
    Team,
)
from governance.selectors import borrowed, scheduling, state_cache
from governance.selectors import capacity as capacity_selectors
from governance.selectors import change_requests as cr_selectors
from governance.selectors import exceptions as exception_selectors
from governance.selectors import teams as team_selectors
from governance.web import fragments
from governance.web.presenters import jobs as web_jobs

PENDING_SHOWN = 50
EXCEPTIONS_SHOWN = 20


@dataclass
class TeamSummary:
    """One team's shares summed over their types: what the "other teams" list shows."""

    team_id: int
    name: str
    shares: list[str] = field(default_factory=list)
    limit: int = 0
    usage: int = 0
    own: int = 0
    borrowed: int = 0
    lent: int = 0
    pending: int = 0


def all_usage(fingerprint: str | None = None) -> list[Any]:
    """Every queue's usage figures, cached under the stored state (one query when
    nothing changed; none when ``fingerprint``, ``queue_state_fingerprint()``, is given)."""
    return state_cache.cached(
        f"team-usage:{fingerprint or state_cache.queue_state_fingerprint()}",
        lambda: capacity_selectors.queues_usage(list(JobQueue.objects.order_by("name"))),
    )


def summaries(usage: list[Any]) -> dict[int, TeamSummary]:
    """Team id -> its summary over every queue."""
    out: dict[int, TeamSummary] = {}
    for queue in usage:
        for share in queue["shares"]:
            summary = out.setdefault(share["team"], TeamSummary(share["team"], share["team_name"]))
            summary.shares.append(f"{queue['name']}/{share['name']}")
            for row in share["types"]:
                summary.limit += row["limit"]
                summary.usage += row["usage"]
                summary.own += row["own"]
                summary.borrowed += row["borrowed"]
                summary.lent += row["lent"]
                summary.pending += row["pending"]
    for team_id, name in Team.objects.exclude(pk__in=out).values_list("pk", "name"):
        out[team_id] = TeamSummary(team_id, name)
    return out


def share_rows(team: Team, usage: list[Any]) -> list[dict[str, Any]]:
    """The team's shares, one row per share and type, with the usage bars' figures."""
    rows = []
    for queue in usage:
        for share in queue["shares"]:
            if share["team"] != team.pk:
                continue
            for row in share["types"]:
                rows.append(
                    {
                        "queue": queue["name"],
                        "queue_id": queue["queue"],
                        "share": share["name"],
                        "share_id": share["share"],
                        "policy": share["policy"],
                        "enabled": share["enabled"],
                        **row,
                    }
                )
    return rows


def queue_fingerprints(everything: str | None = None) -> dict[int, str]:
    """Queue id -> its ``state_cache.queue_state_fingerprint``, read once on first use: a
    page hands one to every cached reading of that queue (reasons, forecasts, exposure),
    which would otherwise each read it again. With ``everything`` (the fingerprint of
    every queue, already read) each is kept under it (``queue_fingerprint_within``)."""

    class Fingerprints(dict[int, str]):
        def __missing__(self, queue_id: int) -> str:
            self[queue_id] = (
                state_cache.queue_state_fingerprint(queue_id)
                if everything is None
                else state_cache.queue_fingerprint_within(everything, queue_id)
            )
            return self[queue_id]

    return Fingerprints()


def pending_jobs(
    team: Team, fingerprints: dict[int, str] | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The team's first ``PENDING_SHOWN`` pending jobs in the cycle's order (priority,
    then submission, then id) with their reasons and forecast, and how many wait.
    ``fingerprints``: ``queue_fingerprints()`` shared with the page's other reads."""
    fingerprints = queue_fingerprints() if fingerprints is None else fingerprints
    jobs_qs = Job.objects.filter(share__team=team, state=JobState.PENDING)
    total = jobs_qs.count()
    jobs = list(
        jobs_qs.select_related("share", "queue").order_by("-priority", "submitted_at", "id")[
            :PENDING_SHOWN
        ]
    )
    by_queue: dict[int, list[int]] = defaultdict(list)
    for job in jobs:
        by_queue[job.queue_id].append(job.pk)
    reasons: dict[int, list[dict[str, Any]]] = {}
    forecasts: dict[int, dict[str, Any]] = {}
    entitled: dict[int, dict[str, Any]] = {}
    for queue_id, ids in by_queue.items():
        fingerprint = fingerprints[queue_id]
        reasons.update(scheduling.explain_jobs(queue_id, ids, fingerprint=fingerprint))
        found, basis = scheduling.forecast_jobs(queue_id, ids, fingerprint=fingerprint)
        for pk, forecast in found.items():
            forecasts[pk] = {**forecast, "basis": basis}
        found, basis = scheduling.entitled_forecast_jobs(queue_id, ids, fingerprint=fingerprint)
        for pk, forecast in found.items():
            entitled[pk] = {**forecast, "basis": basis, "words": borrowed.entitled_words(forecast)}
    rows = [
        {
            "job": job,
            "reasons": web_jobs.with_reason_words(reasons.get(job.pk)),
            "forecast": forecasts.get(job.pk),
            "entitled": entitled.get(job.pk),
        }
        for job in jobs
    ]
    return rows, total


def borrowed_running(
    team: Team, fingerprints: dict[int, str] | None = None
) -> list[dict[str, Any]]:
    """The team's running jobs on borrowed capacity (their share borrows on their type),
    each with its exposure (``selectors.borrowed``), among its first ``PENDING_SHOWN``
    running jobs, the longest running first."""
    fingerprints = queue_fingerprints() if fingerprints is None else fingerprints
    jobs = list(
        Job.objects.filter(share__team=team, state=JobState.RUNNING)
        .select_related("share", "queue", "instance_type")
        .order_by("started_at", "id")[:PENDING_SHOWN]
    )
    by_queue: dict[int, list[int]] = defaultdict(list)
    for job in jobs:
        by_queue[job.queue_id].append(job.pk)
    exposure: dict[int, dict[str, Any]] = {}
    for queue_id, ids in by_queue.items():
        exposure.update(scheduling.exposure_jobs(queue_id, ids, fingerprint=fingerprints[queue_id]))
    return [
        {
            "job": job,
            "exposure": {**exposure[job.pk], "summary": borrowed.exposure_words(exposure[job.pk])},
        }
        for job in jobs
        if job.pk in exposure
    ]


# What the team view's rows of exceptions and change requests show: their selectors'
# every column of job, share, team and people would cost the page more than the rows.
EXCEPTION_ROW_FIELDS = ("priority", "state", "expires_at", "created_at", "job__name", "share__name")
CHANGE_REQUEST_ROW_FIELDS = (
    "state",
    "proposed",
    "created_at",
    "decided_at",
    "share__name",
    "share__queue__name",
    "requester__username",
    "decided_by__username",
)


def team_exceptions(team: Team) -> list[Any]:
    """The team's open and granted exceptions first, then the latest others (with only
    what their rows show)."""
    open_states = (ExceptionState.PENDING, ExceptionState.APPROVED)
    found = (
        exception_selectors.exceptions()
        .select_related(None)
        .select_related("job", "share")
        .only(*EXCEPTION_ROW_FIELDS)
        .filter(team=team)
    )
    items = list(found[:EXCEPTIONS_SHOWN])
    return sorted(items, key=lambda e: e.state not in open_states)


def team_change_requests(team: Team) -> list[Any]:
    """The team's pending share change requests first, then the latest others (with
    only what their rows show)."""
    found = (
        cr_selectors.change_requests()
        .select_related(None)
        .select_related("share__queue", "requester", "decided_by")
        .only(*CHANGE_REQUEST_ROW_FIELDS)
        .filter(team=team)
    )
    items = list(found[:EXCEPTIONS_SHOWN])
    return sorted(items, key=lambda cr: cr.state != ChangeRequestState.PENDING)


def team_queue_ids(team: Team, usage: list[Any]) -> list[int]:
    """The queues the team has shares in, read off ``all_usage`` (which lists every
    share of every queue, under the same stored state): no query."""
    return sorted(
        {queue["queue"] for queue in usage for s in queue["shares"] if s["team"] == team.pk}
    )


def team_share_ids(team: Team, usage: list[Any]) -> list[int]:
    """The team's shares, read off ``all_usage`` as ``team_queue_ids``."""
    return sorted(s["share"] for queue in usage for s in queue["shares"] if s["team"] == team.pk)


@dataclass(frozen=True)
class TeamsLayout:
    """What the team page needs before its cached fragment: the teams it shows in full
    (by id, those that exist), the queues and shares of each (``team_queue_ids``,
    ``team_share_ids``) and those queues' state fingerprints."""

    teams: dict[int, Team]
    queue_ids: dict[int, list[int]]
    share_ids: dict[int, list[int]]
    fingerprints: dict[int, str]


LAYOUT_VERSION = 1


def layout(fingerprint: str, team_ids: Collection[int]) -> TeamsLayout:
    """The ``TeamsLayout`` of ``team_ids`` under ``fingerprint`` (``queue_state_fingerprint()``,
    read by the caller). Every part of it is stored in rows that fingerprint digests
    (teams, shares and queues; a queue's own fingerprint digests a part of those rows,
    ``queue_fingerprint_within``), so it is cached under it: one cache read where a view
    read the team (a query), the usage figures and each queue's fingerprint (a cache
    read each); and under the release, whose models unpickle it."""
    ids = sorted(set(team_ids))

    def compute() -> TeamsLayout:
        usage = all_usage(fingerprint)
        teams = {team.pk: team for team in team_selectors.teams_by_id(ids)} if ids else {}
        queue_ids = {pk: team_queue_ids(team, usage) for pk, team in teams.items()}
        queues = sorted({queue_id for found in queue_ids.values() for queue_id in found})
        return TeamsLayout(
            teams=teams,
            queue_ids=queue_ids,
            share_ids={pk: team_share_ids(team, usage) for pk, team in teams.items()},
            fingerprints={q: state_cache.queue_fingerprint_within(fingerprint, q) for q in queues},
        )

    # hashed: a user in many teams would pass the 250 characters a key may have
    named = hashlib.blake2b(
        f"{fragments.code_version()}|{fingerprint}|{ids}".encode(), digest_size=16
    ).hexdigest()
    return state_cache.cached(f"team-layout:{LAYOUT_VERSION}:{named}", compute)
