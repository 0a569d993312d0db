"""Reads for the governance pages (exceptions, agreements, audit, priorities).

Everything here is a fixed number of queries whatever the data size: the pages call
these and never walk relations per row.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Case, Count, IntegerField, Q, QuerySet, Value, When
from django.db.models.fields.json import KT
from django.utils import timezone

from governance import roles
from governance.models import (
    AuditEntry,
    AuditEvent,
    DecisionRule,
    ExceptionState,
    Job,
    PriorityException,
    Share,
    Team,
)
from governance.models.jobs import ACTIVE_STATES
from governance.models.shares import ShareLimit
from governance.roles import AnyUser
from governance.selectors.capacity import job_instances
from governance.selectors.exceptions import exceptions as all_exceptions
from governance.selectors.scheduling import accounting
from governance.templatetags.web_time import span_words

RECLAIM_WINDOW_DAYS = 30


def relative(when: datetime | None, now: datetime | None = None) -> str:
    """ "in 3 days" / "2 minutes ago" (largest unit only) for people reading a page."""
    if when is None:
        return ""
    now = now or timezone.now()
    if abs((when - now).total_seconds()) < 60:
        return "just now"
    # Plain arithmetic, not timesince (0.1-0.3 ms a call): see templatetags.web_time.
    if when > now:
        return f"in {span_words(now, when, depth=1)}".replace("\xa0", " ")
    return f"{span_words(when, now, depth=1)} ago".replace("\xa0", " ")


# --- exceptions ---------------------------------------------------------------------


def exceptions_listing(
    *, state: str | None = None, team_id: int | None = None
) -> QuerySet[PriorityException]:
    """Exceptions for the list page: pending first, then newest first."""
    qs = all_exceptions().select_related("job__share", "share__queue", "job__queue")
    if state:
        qs = qs.filter(state=state)
    if team_id:
        qs = qs.filter(team_id=team_id)
    return qs.order_by(state_order(), "-created_at", "-id")


def review_queue() -> QuerySet[PriorityException]:
    """Pending exceptions, oldest first: what reviewers decide next. A job exception whose
    job has ended is left out: nothing is left to decide (the system closes it)."""
    return (
        all_exceptions()
        .select_related("job__share", "share__queue")
        .filter(state=ExceptionState.PENDING)
        .filter(Q(job__isnull=True) | Q(job__state__in=ACTIVE_STATES))
        .order_by("created_at", "id")
    )


def exception_detail(exception_id: int) -> PriorityException | None:
    return (
        all_exceptions()
        .select_related("job__share", "job__queue", "share__queue")
        .filter(pk=exception_id)
        .first()
    )


def exception_history(exc: PriorityException) -> QuerySet[AuditEntry]:
    """The exception's own audit entries, oldest first, plus the job priority changes it
    caused (same job, reprioritised, from the filing on)."""
    condition = Q(subject_type="priorityexception", subject_id=str(exc.pk))
    if exc.job_id is not None:
        condition |= Q(
            event_type=AuditEvent.JOB_REPRIORITISED,
            job_id=exc.job_id,
            created_at__gte=exc.created_at,
        )
    return AuditEntry.objects.select_related("actor").filter(condition).order_by("created_at", "id")


def lead_targets(user: AnyUser) -> tuple[list[Job], list[Share]]:
    """Active jobs and shares of the teams ``user`` leads (what they may file for)."""
    team_ids = roles.lead_team_ids(user)
    jobs = list(
        Job.objects.select_related("share", "share__team")
        .filter(share__team_id__in=team_ids, state__in=ACTIVE_STATES)
        .order_by("share__team__name", "-priority", "name", "id")
    )
    shares = list(
        Share.objects.select_related("queue", "team")
        .filter(team_id__in=team_ids)
        .order_by("team__name", "queue__name", "name")
    )
    return jobs, shares


def teams_for_filter() -> list[Team]:
    return list(Team.objects.order_by("name"))


# --- agreements ---------------------------------------------------------------------


@dataclass
class TypeUsage:
    instance_type: str
    limit: int
    usage: int
    own: int
    borrowed: int
    idle: int


@dataclass
class LinkedShare:
    share: Share
    types: list[TypeUsage] = field(default_factory=list)
    reclaimed_from: int = 0  # this share's jobs preempted by reclaim
    reclaimed_by: int = 0  # jobs this share's jobs preempted by reclaim


def linked_share_usage(share_ids: list[int], *, now: datetime | None = None) -> list[LinkedShare]:
    """Each share's limits and current usage per type (the engine's accounting: own,
    borrowed, idle) and its reclaim counts over the last 30 days.

    Four queries whatever the number of shares, jobs or audit entries.
    """
    if not share_ids:
        return []
    now = now or timezone.now()
    shares = list(
        Share.objects.select_related("queue", "team")
        .filter(pk__in=share_ids)
        .order_by("queue__name", "name")
    )
    limits: dict[int, dict[str, int]] = defaultdict(dict)
    for share_id, type_name, count in ShareLimit.objects.filter(share_id__in=share_ids).values_list(
        "share_id", "instance_type__name", "count"
    ):
        limits[share_id][type_name] = count
    usage: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    running = Job.objects.filter(
        share_id__in=share_ids, state="RUNNING", instance_type__isnull=False
    ).values("share_id", "instance_type__name", "preferences", "preference", "count")
    for job in running:
        usage[job["share_id"]][job["instance_type__name"]] += job_instances(job)

    # Reclaims in one grouped query: as victim (the entry's share) and as preemptor
    # (the entry's queue and ``after.by_share`` name; share names are unique per queue).
    by_key = {(s.queue_id, s.name): s.pk for s in shares}
    since = now - timedelta(days=RECLAIM_WINDOW_DAYS)
    rows = (
        AuditEntry.objects.filter(
            event_type=AuditEvent.JOB_PREEMPTED,
            created_at__gte=since,
            after__rule=DecisionRule.RECLAIM,
        )
        .filter(
            Q(share_id__in=share_ids)
            | Q(
                queue_id__in={s.queue_id for s in shares},
                after__by_share__in=[s.name for s in shares],
            )
        )
        .annotate(by_share=KT("after__by_share"))
        .values("share_id", "queue_id", "by_share")
        .annotate(n=Count("id"))
        .order_by()
    )
    victims: dict[int, int] = defaultdict(int)
    reclaimers: dict[int, int] = defaultdict(int)
    wanted = {s.pk for s in shares}
    for row in rows:
        if row["share_id"] in wanted:
            victims[row["share_id"]] += row["n"]
        preemptor = by_key.get((row["queue_id"], row["by_share"]))
        if preemptor is not None:
            reclaimers[preemptor] += row["n"]

    result = []
    for share in shares:
        types = []
        names = sorted(set(limits[share.pk]) | set(usage[share.pk]))
        for name in names:
            limit = limits[share.pk].get(name, 0)
            used = usage[share.pk].get(name, 0)
            types.append(
                TypeUsage(
                    instance_type=name,
                    limit=limit,
                    usage=used,
                    own=accounting.own(limit, used),
                    borrowed=accounting.borrowed(limit, used),
                    idle=accounting.idle(limit, used),
                )
            )
        result.append(
            LinkedShare(
                share=share,
                types=types,
                reclaimed_from=victims.get(share.pk, 0),
                reclaimed_by=reclaimers.get(share.pk, 0),
            )
        )
    return result


def share_choices_for(user: AnyUser) -> QuerySet[Share]:
    """Shares a user may link to an agreement: every share for admins, their teams'
    shares for leads."""
    qs = Share.objects.select_related("queue", "team").order_by("queue__name", "name")
    if roles.is_admin(user):
        return qs
    return qs.filter(team_id__in=roles.lead_team_ids(user))


def usernames() -> list[str]:
    return list(get_user_model().objects.order_by("username").values_list("username", flat=True))


# --- audit --------------------------------------------------------------------------


def keyset_page(
    queryset: QuerySet[AuditEntry],
    *,
    older_than: tuple[datetime, int] | None,
    newer_than: tuple[datetime, int] | None,
    size: int,
) -> tuple[list[AuditEntry], bool, bool]:
    """One page of the trail (newest first) by keyset on (created_at, id): no OFFSET and
    no COUNT(*). Returns the entries and whether older / newer entries exist.

    ``older_than`` pages backwards from a cursor; ``newer_than`` pages forwards (toward
    the present) and the page is returned newest first as usual.
    """
    if newer_than is not None:
        at, pk = newer_than
        rows = list(
            queryset.filter(Q(created_at__gt=at) | Q(created_at=at, id__gt=pk)).order_by(
                "created_at", "id"
            )[: size + 1]
        )
        has_newer = len(rows) > size
        rows = rows[:size]
        rows.reverse()
        return rows, True, has_newer
    if older_than is not None:
        at, pk = older_than
        queryset = queryset.filter(Q(created_at__lt=at) | Q(created_at=at, id__lt=pk))
    rows = list(queryset.order_by("-created_at", "-id")[: size + 1])
    has_older = len(rows) > size
    return rows[:size], has_older, older_than is not None


def audit_filter_choices() -> dict[str, Any]:
    """Teams and shares for the audit filter selects (two small queries)."""
    return {
        "teams": list(Team.objects.order_by("name").values_list("id", "name")),
        "shares": list(
            Share.objects.order_by("queue__name", "name").values_list("id", "queue__name", "name")
        ),
    }


def state_order() -> Case:
    """Pending first in listings."""
    return Case(
        When(state=ExceptionState.PENDING, then=Value(0)),
        default=Value(1),
        output_field=IntegerField(),
    )


def share_names(ids: set[int]) -> dict[int, str]:
    """``queue/name`` of shares by id (for agreement versions naming unlinked shares)."""
    return {
        pk: f"{queue}/{name}"
        for pk, queue, name in Share.objects.filter(pk__in=ids).values_list(
            "id", "queue__name", "name"
        )
    }
