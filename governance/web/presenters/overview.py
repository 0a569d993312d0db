"""Reads for the overview and queue pages: usage bars and the live decision feed.

The figures come from ``selectors.capacity.queues_usage`` (the same arithmetic as
``/api/queues/{id}/usage/``); this module only shapes them into bar segments and turns
scheduling audit entries into sentences a team lead reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from governance.models import AuditEntry, AuditEvent, DecisionRule, JobQueue, Share, Team
from governance.models.shares import Policy
from governance.selectors import capacity as capacity_selectors
from governance.selectors.capacity import PlanUsage

FEED_EVENTS = (
    AuditEvent.JOB_ADMITTED,
    AuditEvent.JOB_PREEMPTED,
    AuditEvent.JOB_FAILED,
    AuditEvent.JOB_TIMED_OUT,
    AuditEvent.JOB_COMPLETED,
    AuditEvent.JOB_LOST,
)
FEED_LENGTH = 30

# Bar segments, left to right, with the legend's words.
SEGMENTS = (
    ("own", "own use"),
    ("borrowed", "borrowed"),
    ("lent", "lent out"),
    ("idle_lend", "idle, lendable"),
    ("idle_reserved", "idle, reserved"),
    ("plan_used", "in use on the plan"),
    ("plan_idle", "plan idle (paid for, unused)"),
)

POLICY_WORDS: dict[str, str] = {
    Policy.RESERVE: "reserves idle",
    Policy.LEND: "lends idle",
    Policy.LEND_AND_BORROW: "lends and borrows",
}

RULE_WORDS: dict[str, str] = {str(rule): str(rule.label) for rule in DecisionRule}


@dataclass
class Segment:
    kind: str  # css class: own, borrowed, lent, idle-lend, idle-reserved
    label: str
    count: int
    width: float  # percent of the bar (scale: the type's capacity)


@dataclass
class ShareBar:
    share_id: int
    name: str
    team: str
    policy: str
    policy_label: str
    enabled: bool
    limit: int
    usage: int
    own: int
    borrowed: int
    lent: int
    idle_lend: int
    idle_reserved: int
    pending: int
    segments: list[Segment]
    overflow: bool  # limit or usage beyond the bar's scale (drawn clipped)
    limit_at: float  # percent position of the share's limit on the bar


@dataclass
class TypeBlock:
    instance_type: str
    capacity: int
    limits: int
    usage: int
    borrowed: int
    unowned: int
    free: int
    oversubscribed: bool
    over_by: int
    shares: list[ShareBar]
    total_segments: list[Segment]


@dataclass
class PlanBar:
    """A capacity plan's bar: its usage in the plan colour over its count, apart from
    the on-demand bars (docs/scheduling.md#capacity-plans)."""

    plan_id: int
    name: str
    share_id: int
    share: str
    instance_type: str
    count: int
    usage: int
    state: str
    start: str
    end: str
    segments: list[Segment]
    idle: int
    pending: int


@dataclass
class QueueBlock:
    queue_id: int
    name: str
    description: str
    types: list[TypeBlock]
    pending: int
    running_instances: int
    plans: list[PlanBar] = field(default_factory=list)
    plan_instances: int = 0  # instances running on capacity plans (not in the above)
    shares: list[Any] = field(default_factory=list)


def _segments(values: list[tuple[str, int]], scale: int) -> tuple[list[Segment], bool]:
    """Segments as percents of ``scale``; clipped at 100% (``True`` when clipped)."""
    out: list[Segment] = []
    used = 0.0
    clipped = False
    labels = dict(SEGMENTS)
    for key, count in values:
        if count <= 0:
            continue
        width = 100.0 * count / scale if scale else 0.0
        if used + width > 100.0:
            width = max(0.0, 100.0 - used)
            clipped = True
        used += width
        out.append(Segment(key.replace("_", "-"), labels.get(key, key), count, round(width, 3)))
    return out, clipped


def usage_blocks(queue_list: list[JobQueue]) -> list[QueueBlock]:
    """Every queue's usage, per type and share, ready to draw as stacked bars."""
    blocks: list[QueueBlock] = []
    for queue, usage in zip(queue_list, capacity_selectors.queues_usage(queue_list), strict=True):
        share_info = {s["share"]: s for s in usage["shares"]}
        types: list[TypeBlock] = []
        pending_total = 0
        for totals in usage["types"]:
            type_name = totals["instance_type"]
            cap = totals["capacity"]
            scale = max(cap, 1)
            bars: list[ShareBar] = []
            for share in usage["shares"]:
                row = next((r for r in share["types"] if r["instance_type"] == type_name), None)
                if row is None:
                    continue
                lending = share["policy"] in (Policy.LEND, Policy.LEND_AND_BORROW)
                idle_free = row["idle"] - row["lent"]
                idle_lend = idle_free if lending else 0
                idle_reserved = 0 if lending else row["idle"]
                segments, clipped = _segments(
                    [
                        ("own", row["own"]),
                        ("borrowed", row["borrowed"]),
                        ("lent", row["lent"]),
                        ("idle_lend", idle_lend),
                        ("idle_reserved", idle_reserved),
                    ],
                    scale,
                )
                pending_total += row["pending"]
                bars.append(
                    ShareBar(
                        share_id=share["share"],
                        name=share["name"],
                        team=share["team_name"],
                        policy=share["policy"],
                        policy_label=POLICY_WORDS.get(share["policy"], share["policy"]),
                        enabled=share["enabled"],
                        limit=row["limit"],
                        usage=row["usage"],
                        own=row["own"],
                        borrowed=row["borrowed"],
                        lent=row["lent"],
                        idle_lend=idle_lend,
                        idle_reserved=idle_reserved,
                        pending=row["pending"],
                        segments=segments,
                        overflow=clipped,
                        limit_at=round(min(100.0, 100.0 * row["limit"] / scale), 3),
                    )
                )
            own_total = sum(b.own for b in bars)
            total_segments, _ = _segments(
                [("own", own_total), ("borrowed", totals["borrowed"])], scale
            )
            types.append(
                TypeBlock(
                    instance_type=type_name,
                    capacity=cap,
                    limits=totals["limits"],
                    usage=totals["usage"],
                    borrowed=totals["borrowed"],
                    unowned=totals["unowned"],
                    free=max(0, cap - totals["usage"]),
                    oversubscribed=totals["oversubscribed"],
                    over_by=max(0, totals["limits"] - cap),
                    shares=bars,
                    total_segments=total_segments,
                )
            )
        blocks.append(
            QueueBlock(
                queue_id=queue.pk,
                name=queue.name,
                description=queue.description,
                types=types,
                pending=pending_total + sum(plan["pending"] for plan in usage["plans"]),
                running_instances=sum(t.usage for t in types),
                shares=list(share_info.values()),
                plans=[_plan_bar(plan) for plan in usage["plans"]],
                plan_instances=sum(plan["usage"] for plan in usage["plans"]),
            )
        )
    return blocks


def _utc_text(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _plan_bar(plan: PlanUsage) -> PlanBar:
    idle = max(0, plan["count"] - plan["usage"]) if plan["state"] == "active" else 0
    segments, _ = _segments(
        [("plan_used", plan["usage"]), ("plan_idle", idle)], max(plan["count"], 1)
    )
    return PlanBar(
        plan_id=plan["id"],
        name=plan["name"],
        share_id=plan["share"],
        share=plan["share_name"],
        instance_type=plan["instance_type"],
        count=plan["count"],
        usage=plan["usage"],
        state=plan["state"],
        start=_utc_text(plan["start"]),
        end=_utc_text(plan["end"]),
        segments=segments,
        idle=idle,
        pending=plan["pending"],
    )


def overview_queues() -> list[JobQueue]:
    return list(JobQueue.objects.order_by("name"))


# ---------------------------------------------------------------------------- the feed


@dataclass
class FeedItem:
    at: datetime
    event_type: str
    kind: str  # admitted / preempted / failed / timed_out / completed / lost
    text: str
    rule: str
    rule_words: str
    queue: str
    job_id: int | None


def feed_entries(queue_id: int | None = None, limit: int = FEED_LENGTH) -> QuerySet[AuditEntry]:
    entries = AuditEntry.objects.filter(event_type__in=FEED_EVENTS).select_related(
        "team", "share", "job", "queue"
    )
    if queue_id is not None:
        entries = entries.filter(queue_id=queue_id)
    return entries.order_by("-created_at", "-id")[:limit]


def _name(after: dict[str, Any], key: str, fallback: str) -> str:
    value = after.get(key)
    return str(value) if value not in (None, "") else fallback


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _work(seconds: Any) -> str:
    """Lost work in work units (seconds at speed 1.0), in words."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return ""
    if value <= 0:
        return "no work lost"
    if value < 120:
        return f"{value:.0f} s of work lost"
    if value < 7200:
        return f"{value / 60:.0f} min of work lost"
    return f"{value / 3600:.1f} h of work lost"


def describe(entry: AuditEntry) -> FeedItem:
    """One scheduling decision as a sentence, with its rule in plain words."""
    after: dict[str, Any] = entry.after if isinstance(entry.after, dict) else {}
    job = _name(after, "job", entry.job.name if entry.job else entry.subject_repr)
    team = _name(after, "team", entry.team.name if entry.team else "a team")
    share = _name(after, "share", entry.share.name if entry.share else "its share")
    itype = _name(after, "instance_type", "its instance type")
    rule = str(after.get("rule") or "")
    kind = entry.event_type.split(".", 1)[1]
    count = after.get("count")
    if entry.event_type == AuditEvent.JOB_ADMITTED:
        borrowed = int(after.get("borrowed") or 0)
        size = f"{count} x {itype}" if count and count != 1 else itype
        if rule == "borrow" or borrowed:
            text = f"{team}'s {job} started on {size} borrowing {borrowed} beyond its limit"
        else:
            text = f"{team}'s {job} started on {size}"
    elif entry.event_type == AuditEvent.JOB_PREEMPTED:
        by = after.get("by")
        by_team = _name(after, "by_team", "another team")
        lost = _work(after.get("lost_work"))
        if rule == "reclaim":
            text = (
                f"{by_team}'s job {by or 'a job'} took back its {itype} from "
                f"{team}'s borrowed run {job}"
            )
        elif rule == "priority":
            text = f"{team}'s {by or 'a higher-priority job'} preempted {job} in the same share"
        elif rule == "capacity_lost":
            text = f"{team}'s {job} was stopped: the queue lost {itype} capacity"
        else:
            text = f"{team}'s {job} was preempted"
        if lost:
            text += f"; {lost}"
    elif entry.event_type == AuditEvent.JOB_FAILED:
        if rule == "preemption_retries_exhausted":
            times = after.get("preemptions")
            text = (
                f"{team}'s {job} failed: preempted "
                f"{_plural(int(times), 'time') if times else 'more often'} than {share} allows"
            )
        else:
            text = f"{team}'s {job} failed"
    elif entry.event_type == AuditEvent.JOB_TIMED_OUT:
        waited = after.get("max_pending")
        text = f"{team}'s {job} gave up waiting" + (
            f" after its max pending time of {int(waited) // 60} min" if waited else ""
        )
        rule = rule or "timeout"
    elif entry.event_type == AuditEvent.JOB_COMPLETED:
        text = f"{team}'s {job} completed on {itype}"
    elif entry.event_type == AuditEvent.JOB_LOST:
        text = f"{team}'s {job} lost its run and was requeued"
        lost = _work(after.get("lost_work"))
        if lost:
            text += f"; {lost}"
    else:
        text = f"{entry.subject_repr}: {entry.event_type}"
    return FeedItem(
        at=entry.created_at,
        event_type=entry.event_type,
        kind=kind,
        text=text,
        rule=rule,
        rule_words=RULE_WORDS.get(rule, rule.replace("_", " ")),
        queue=entry.queue.name if entry.queue else "",
        job_id=entry.job_id,
    )


def feed_state() -> str:
    """A digest of what the overview's feed shows: the ids of its entries, in order, and
    the queue, team and share rows whose names a sentence may fall back on (id, ``xmin``
    and ``ctid``: every new row version has a new ``ctid``, even within one transaction).
    Audit entries never change, so the same digest means the same sentences. One query,
    served by the ``audit_feed`` partial index."""
    entries = AuditEntry._meta.db_table
    placeholders = ", ".join(["%s"] * len(FEED_EVENTS))
    digests = ", ".join(
        f"(SELECT string_agg(id || ':' || xmin || ':' || ctid, ',' ORDER BY id) "
        f"FROM {model._meta.db_table})"
        for model in (JobQueue, Team, Share)
    )
    sql = f"""
        SELECT md5(concat_ws('|',
          (SELECT string_agg(id::text, ',') FROM (
             SELECT id FROM {entries} WHERE event_type IN ({placeholders})
             ORDER BY created_at DESC, id DESC LIMIT %s) newest),
          {digests}))
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [*(str(e) for e in FEED_EVENTS), FEED_LENGTH])
        row = cursor.fetchone()
    return f"{connection.settings_dict['NAME']}:{row[0] if row else ''}"


def feed(queue_id: int | None = None, limit: int = FEED_LENGTH) -> list[FeedItem]:
    """The latest admissions, reclaims, preemptions and endings, newest first (one query)."""
    return [describe(entry) for entry in feed_entries(queue_id, limit)]
