"""Reads of instance types and queues, and the per-queue usage accounting.

``queue_usage`` gives the figures the API and the pages show, from the engine's own
accounting function (``scheduler.engine.accounting``, through ``selectors.scheduling``),
so what people see is what the scheduler decides with:

- ``usage(S,T)``: instances held by S's RUNNING jobs on T (the count of the preference
  each job runs on); ``own = min(usage, limit)``, ``borrowed = max(0, usage - limit)``,
  ``idle = max(0, limit - usage)``. A type a share has no limit for counts as limit 0.
- ``lent(S,T)``: how much of S's idle entitlement other shares' borrowing occupies now.
  The total borrowed on T is first set against capacity no share owns
  (``max(0, capacity - sum of limits)``); the rest is laid on the idle entitlement of
  lending shares (policy LEND or LEND_AND_BORROW) in share-name order, each up to its
  idle. RESERVE shares never lend. When capacity is below the sum of limits the figures
  still follow this rule; the queue is then shown as oversubscribed.
- ``pending(S,T)``: how many PENDING jobs of S have T as their *first* preference, so
  every pending job is counted once per share (a job whose first preference names a
  capacity plan is counted on that plan instead).
- ``plans``: the queue's capacity plans (not ended, ended within a day, or with jobs
  still on them until the scheduler's next cycle stops them) with their
  count and usage. Jobs running on a plan hold the plan's instances: they are in none
  of the figures above (docs/scheduling.md#capacity-plans).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.db.models import Count, Prefetch, Q, QuerySet
from django.db.models.fields.json import KT
from django.utils import timezone

from governance.models import (
    CapacityPlan,
    InstanceType,
    Job,
    JobQueue,
    JobState,
    QueueCapacity,
    Share,
    SlurmDrift,
    SlurmQueueConfig,
    SlurmTeamConfig,
    SlurmTypeConfig,
)
from governance.models.shares import ShareLimit
from governance.selectors.scheduling import ShareOnType, account_type


class UsageRow(TypedDict):
    instance_type: str
    limit: int
    usage: int
    own: int
    borrowed: int
    lent: int
    idle: int
    pending: int


class ShareUsage(TypedDict):
    share: int
    name: str
    team: int
    team_name: str
    policy: str
    enabled: bool
    types: list[UsageRow]


class TypeTotals(TypedDict):
    instance_type: str
    capacity: int
    limits: int
    usage: int
    borrowed: int
    unowned: int
    oversubscribed: bool


class PlanUsage(TypedDict):
    id: int
    name: str
    share: int
    share_name: str
    instance_type: str
    count: int
    usage: int
    pending: int
    state: str
    start: str
    end: str


class QueueUsage(TypedDict):
    queue: int
    name: str
    types: list[TypeTotals]
    shares: list[ShareUsage]
    plans: list[PlanUsage]


# Plans ended within this long still show beside the queue's usage (what just ended).
RECENTLY_ENDED = timedelta(days=1)


def plan_usage_row(plan: CapacityPlan, usage: int, now: datetime, *, pending: int = 0) -> PlanUsage:
    """A plan's count and usage (its running jobs' instances), apart from on-demand, and
    how many pending jobs name it as their first preference."""
    return PlanUsage(
        id=plan.pk,
        name=plan.name,
        share=plan.share_id,
        share_name=plan.share.name,
        instance_type=plan.instance_type.name,
        count=plan.count,
        usage=usage,
        pending=pending,
        state=plan.state_at(now).value,
        start=plan.start.isoformat(),
        end=plan.end.isoformat(),
    )


def instance_types() -> QuerySet[InstanceType]:
    return InstanceType.objects.order_by("name")


def queue(pk: int) -> JobQueue | None:
    return JobQueue.objects.filter(pk=pk).first()


def queue_ids() -> list[int]:
    return list(JobQueue.objects.order_by("id").values_list("id", flat=True))


def queues() -> QuerySet[JobQueue]:
    return JobQueue.objects.prefetch_related(
        Prefetch(
            "capacities",
            queryset=QueueCapacity.objects.select_related("instance_type").order_by(
                "instance_type__name"
            ),
        )
    ).order_by("name")


def slurm_mapping(queue: JobQueue) -> dict[str, Any]:
    """How a queue maps onto Slurm: account, QOS, grace, per type its partition, feature,
    GPUs per instance and gres name, per team its Unix user (and account, QOS), and
    whether the drift guard only reports (what SLURM_CONFIG_CHANGED audits)."""
    config = SlurmQueueConfig.objects.filter(queue=queue).first()
    types = SlurmTypeConfig.objects.filter(queue=queue).select_related("instance_type")
    teams = SlurmTeamConfig.objects.filter(queue=queue).select_related("team")
    return {
        "account": config.account if config else "",
        "qos": config.qos if config else "",
        "grace_seconds": config.grace_seconds if config else 10,
        "drift_report_only": config.drift_report_only if config else False,
        "teams": {
            t.team.name: {"user": t.unix_user, "account": t.account, "qos": t.qos}
            for t in sorted(teams, key=lambda t: t.team.name)
        },
        "types": {
            t.instance_type.name: {
                "partition": t.partition,
                "feature": t.feature,
                "gpus_per_instance": t.gpus_per_instance,
                "gres_name": t.gres_name,
            }
            for t in sorted(types, key=lambda t: t.instance_type.name)
        },
    }


def slurm_config(queue: JobQueue) -> dict[str, Any]:
    """The mapping plus the executor's health: paused since when, the last error."""
    config = SlurmQueueConfig.objects.filter(queue=queue).first()
    return {
        **slurm_mapping(queue),
        "paused_since": config.paused_since if config else None,
        "last_error": config.last_error if config else "",
        "failures": config.failures if config else 0,
    }


def slurm_drifts(queue: JobQueue, limit: int = 50) -> list[SlurmDrift]:
    """What the drift guard found on the queue's partitions, newest first."""
    return list(SlurmDrift.objects.filter(queue=queue)[:limit])


def capacity_of(queue: JobQueue) -> dict[str, int]:
    """``{type name: count}`` from the prefetched capacities."""
    return {row.instance_type.name: row.count for row in queue.capacities.all()}


def job_instances(job: Job | Mapping[str, Any]) -> int:
    """How many instances a running job holds: the count of the preference it runs on."""
    preferences = job["preferences"] if isinstance(job, Mapping) else job.preferences
    index = job["preference"] if isinstance(job, Mapping) else job.preference
    fallback = job["count"] if isinstance(job, Mapping) else job.count
    try:
        return int(preferences[index]["count"])
    except (TypeError, IndexError, KeyError, ValueError):
        return int(fallback or 1)


def queue_usage(queue: JobQueue) -> QueueUsage:
    """Per share and type: limit, usage, own, borrowed, lent, idle, pending (see module doc)."""
    return queues_usage([queue])[0]


def queues_usage(queue_list: list[JobQueue]) -> list[QueueUsage]:
    """``queue_usage`` for several queues in a constant number of queries (six), so a page
    showing every queue does not run queries per queue. Same arithmetic, one source."""
    ids = [q.pk for q in queue_list]
    capacities: dict[int, dict[str, int]] = defaultdict(dict)
    for queue_id, type_name, count in QueueCapacity.objects.filter(queue_id__in=ids).values_list(
        "queue_id", "instance_type__name", "count"
    ):
        capacities[queue_id][type_name] = count
    shares_by_queue: dict[int, list[Share]] = defaultdict(list)
    for share in (
        Share.objects.filter(queue_id__in=ids)
        .select_related("team")
        .prefetch_related(
            Prefetch("limits", queryset=ShareLimit.objects.select_related("instance_type"))
        )
        .order_by("name")
    ):
        shares_by_queue[share.queue_id].append(share)
    running_by_queue: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    # Jobs on a capacity plan hold the plan's instances, not the queue's: they count
    # neither in a share's usage against its limits nor in the type's total
    # (docs/scheduling.md#capacity-plans).
    on_plans: dict[int, int] = defaultdict(int)
    for job in Job.objects.filter(
        queue_id__in=ids, state=JobState.RUNNING, instance_type__isnull=False
    ).values(
        "queue_id",
        "share_id",
        "instance_type__name",
        "preferences",
        "preference",
        "count",
        "plan_id",
    ):
        if job["plan_id"] is not None:
            on_plans[job["plan_id"]] += job_instances(job)
        else:
            running_by_queue[job["queue_id"]].append(job)
    pending_by_queue: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    # Pending jobs whose first preference names a plan are counted on that plan.
    plan_first: dict[tuple[int, str], int] = defaultdict(int)
    for row in (
        Job.objects.filter(queue_id__in=ids, state=JobState.PENDING)
        .annotate(
            first_type=KT("preferences__0__instance_type"), first_plan=KT("preferences__0__plan")
        )
        .values("queue_id", "share_id", "first_type", "first_plan")
        .annotate(n=Count("id"))
        .order_by()
    ):
        if row["first_plan"]:
            plan_first[(row["queue_id"], row["first_plan"])] += row["n"]
        else:
            pending_by_queue[row["queue_id"]].append(row)
    now = timezone.now()
    plans_by_queue: dict[int, list[PlanUsage]] = defaultdict(list)
    for plan in (
        CapacityPlan.objects.filter(queue_id__in=ids)
        .filter(Q(end__gt=now - RECENTLY_ENDED) | Q(pk__in=list(on_plans)))
        .select_related("share", "instance_type")
        .order_by("start", "name")
    ):
        plans_by_queue[plan.queue_id].append(
            plan_usage_row(
                plan, on_plans[plan.pk], now, pending=plan_first[(plan.queue_id, plan.name)]
            )
        )
    return [
        _usage_of(
            queue,
            capacities[queue.pk],
            shares_by_queue[queue.pk],
            running_by_queue[queue.pk],
            pending_by_queue[queue.pk],
            plans_by_queue[queue.pk],
        )
        for queue in queue_list
    ]


def _usage_of(
    queue: JobQueue,
    capacity: dict[str, int],
    share_list: list[Share],
    running: list[Mapping[str, Any]],
    first_choice: list[Mapping[str, Any]],
    plan_rows: list[PlanUsage],
) -> QueueUsage:
    limits: dict[int, dict[str, int]] = {
        s.pk: {row.instance_type.name: row.count for row in s.limits.all()} for s in share_list
    }
    usage: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in running:
        usage[job["share_id"]][job["instance_type__name"]] += job_instances(job)
    pending: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in first_choice:
        if row["first_type"]:
            pending[row["share_id"]][row["first_type"]] += row["n"]

    type_names = set(capacity)
    for per_share in (limits, usage, pending):
        for by_type in per_share.values():
            type_names.update(by_type)

    rows: dict[int, dict[str, UsageRow]] = {s.pk: {} for s in share_list}
    totals: list[TypeTotals] = []
    for type_name in sorted(type_names):
        # Shares with an entitlement on the type, or activity on it without one (a type
        # removed from its limits, a preference it cannot use), in name order: the order
        # in which lent capacity is attributed to lenders.
        present = [
            share
            for share in share_list
            if type_name in limits[share.pk]
            or usage[share.pk].get(type_name)
            or pending[share.pk].get(type_name)
        ]
        account = account_type(
            capacity.get(type_name, 0),
            [
                ShareOnType(
                    key=share.pk,
                    policy=share.policy,
                    limit=limits[share.pk].get(type_name),
                    usage=usage[share.pk].get(type_name, 0),
                )
                for share in present
            ],
        )
        for figures in account.shares:
            rows[figures.key][type_name] = UsageRow(
                instance_type=type_name,
                limit=figures.limit,
                usage=figures.usage,
                own=figures.own,
                borrowed=figures.borrowed,
                lent=figures.lent,
                idle=figures.idle,
                pending=pending[figures.key].get(type_name, 0),
            )
        totals.append(
            TypeTotals(
                instance_type=type_name,
                capacity=account.capacity,
                limits=account.limits,
                usage=account.usage,
                borrowed=account.borrowed,
                unowned=account.unowned,
                oversubscribed=account.oversubscribed,
            )
        )

    return QueueUsage(
        queue=queue.pk,
        name=queue.name,
        types=totals,
        shares=[
            ShareUsage(
                share=share.pk,
                name=share.name,
                team=share.team_id,
                team_name=share.team.name,
                policy=share.policy,
                enabled=share.enabled,
                types=list(rows[share.pk].values()),
            )
            for share in share_list
        ],
        plans=plan_rows,
    )
