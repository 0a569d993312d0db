"""Reads of shares with their limits (prefetched: no query per share)."""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

from django.db import connection
from django.db.models import Prefetch, QuerySet

from governance import prepared
from governance.models import (
    AuditEntry,
    AuditEvent,
    InstanceType,
    Job,
    JobQueue,
    Membership,
    PriorityDefinition,
    QueueCapacity,
    Share,
    ShareLimit,
    Team,
)
from governance.selectors.rows import built, columns, table, width


def shares() -> QuerySet[Share]:
    return Share.objects.select_related("queue", "team").prefetch_related(
        Prefetch(
            "limits",
            queryset=ShareLimit.objects.select_related("instance_type").order_by(
                "instance_type__name"
            ),
        )
    )


def queue_id_of(share_id: int) -> int | None:
    """The queue of a share (None: no such share), in one index read without building a
    model: a share page reads it at each view (0.07 ms of CPU, the ORM's 0.4 ms)."""
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT queue_id FROM "{Share._meta.db_table}" WHERE id = %s', [share_id])
        row = cursor.fetchone()
    return int(row[0]) if row else None


@cache
def _submission_sql() -> str:
    return (
        f"SELECT {columns(Share, 's')}, {columns(JobQueue, 'q')}, {columns(Team, 't')}, "
        f"(SELECT m.role FROM {table(Membership)} m"
        "  WHERE m.team_id = s.team_id AND m.user_id = %s LIMIT 1), "
        f"ARRAY(SELECT it.name FROM {table(ShareLimit)} l"
        f"  JOIN {table(InstanceType)} it ON it.id = l.instance_type_id"
        "  WHERE l.share_id = s.id ORDER BY it.name), "
        "ARRAY(SELECT json_build_array(p.max_priority, p.usable_by)"
        f"  FROM {table(PriorityDefinition)} p), "
        f"nextval(pg_get_serial_sequence('{table(Job)}', 'id')) "
        f"FROM {table(Share)} s JOIN {table(JobQueue)} q ON q.id = s.queue_id"
        f" JOIN {table(Team)} t ON t.id = s.team_id WHERE s.id = %s"
    )


class SubmissionReads(NamedTuple):
    """What a submission checks itself against (``services.jobs.job_submit``)."""

    share: Share  # with its queue and team
    role: str | None  # the submitter's role in the share's team; None: not a member
    type_names: list[str]  # the types the share has a limit for, sorted
    bands: list[tuple[int, list[str]]]  # as ``selectors.priorities.band_limits``
    new_job_id: int  # taken from the jobs' sequence, for the job if it is accepted


def share_for_submission(share_id: int, user_id: int | None) -> SubmissionReads | None:
    """What a submission to ``share_id`` by ``user_id`` reads; None when there is no such
    share.

    One statement, its text built once (``selectors.rows``): every submission reads this,
    and the ORM spent 1.1 ms of CPU compiling the same select_related query with two
    subqueries each time, a tenth of a submission's web CPU, and read the priority bands
    in a round trip of their own (docs/operations.md#submissions-per-second). It also
    takes the id the job will have, so that its event and audit entry can name it and the
    three rows go to PostgreSQL in one statement (``services.inserts.insert_together``);
    a refused submission leaves that id unused, as a rolled-back insert would.
    """
    with prepared.cursor() as cursor:
        cursor.execute(_submission_sql(), [user_id or 0, share_id])
        row = cursor.fetchone()
    if row is None:
        return None
    queue_at = width(Share)
    team_at = queue_at + width(JobQueue)
    share: Share = built(Share, row[:queue_at])
    share.queue = built(JobQueue, row[queue_at:team_at])
    share.team = built(Team, row[team_at : team_at + width(Team)])
    role, type_names, bands, new_job_id = row[-4:]
    return SubmissionReads(
        share,
        role,
        list(type_names),
        [(int(top), list(usable)) for top, usable in bands],
        new_job_id,
    )


def limits_of(share: Share) -> dict[str, int]:
    """``{type name: count}`` from the prefetched limits."""
    return {row.instance_type.name: row.count for row in share.limits.all()}


def queue_type_names(queue_id: int) -> list[str]:
    """The types a queue has capacity for, by name (what a share's limits may name)."""
    return list(
        QueueCapacity.objects.filter(queue_id=queue_id)
        .order_by("instance_type__name")
        .values_list("instance_type__name", flat=True)
    )


def share_changes(share: Share, limit: int = 10) -> list[AuditEntry]:
    """The share's creation and edits, newest first."""
    return list(
        AuditEntry.objects.filter(
            share_id=share.pk,
            event_type__in=(AuditEvent.SHARE_CREATED, AuditEvent.SHARE_UPDATED),
        )
        .select_related("actor")
        .order_by("-created_at", "-id")[:limit]
    )


def last_change(share: Share) -> AuditEntry | None:
    """The share's latest edit (who changed it last, for a conflict message)."""
    return (
        AuditEntry.objects.filter(share_id=share.pk, event_type=AuditEvent.SHARE_UPDATED)
        .select_related("actor")
        .order_by("-created_at", "-id")
        .first()
    )


def submittable_shares(*, every: bool, team_ids: set[int]) -> list[Share]:
    """Enabled shares one may submit to: ``every`` one (admins), else ``team_ids``'."""
    qs = Share.objects.filter(enabled=True).select_related("queue", "team")
    if not every:
        qs = qs.filter(team_id__in=team_ids)
    return list(qs.order_by("queue__name", "name"))


def limit_types(share_ids: list[int]) -> dict[int, list[str]]:
    """Share id -> the type names it has limits for, sorted."""
    out: dict[int, list[str]] = {}
    for share_id, type_name in (
        ShareLimit.objects.filter(share_id__in=share_ids)
        .values_list("share_id", "instance_type__name")
        .order_by("share_id", "instance_type__name")
    ):
        out.setdefault(share_id, []).append(type_name)
    return out


def filter_choices() -> dict[str, list[tuple[int, str]]]:
    """Queues, shares and teams as (id, label) choices for list filters."""
    return {
        "queues": list(JobQueue.objects.order_by("name").values_list("pk", "name")),
        "shares": [
            (pk, f"{queue} / {name}")
            for pk, queue, name in Share.objects.order_by("queue__name", "name").values_list(
                "pk", "queue__name", "name"
            )
        ],
        "teams": list(Team.objects.order_by("name").values_list("pk", "name")),
    }
