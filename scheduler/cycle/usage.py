"""The usage phase: what a cycle leaves running, recorded in the usage history
(``services/insight.py``, docs/insight.md).

A measurement, not a decision: it runs in a savepoint of its own and never stops a cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from django.db import DatabaseError, transaction

from governance.models import UsageRollup
from governance.services import insight
from scheduler.cycle.snapshot import QueueSnapshot
from scheduler.engine import accounting

log = logging.getLogger(__name__)


def levels(snapshot: QueueSnapshot) -> list[insight.Level]:
    """Own, borrowed, lent and idle per share and type as the engine holds them now, for
    the usage rollups: the one accounting function over the engine's usage, with lent
    capacity attributed to lenders in share name order, as the usage bars do
    (``selectors.capacity.queues_usage``), so the history and the bars agree."""
    shares = {name: share.pk for name, share in snapshot.shares.items()}
    configs = snapshot.engine.shares
    out = []
    for name in sorted(snapshot.type_ids):
        engine_account = snapshot.engine.type_account(name)
        account = accounting.account_type(
            engine_account.capacity,
            [
                accounting.ShareOnType(
                    key=row.key,
                    policy=configs[row.key].policy.value,
                    limit=row.limit if row.has_limit else None,
                    usage=row.usage,
                )
                for row in sorted(engine_account.shares, key=lambda r: r.key)
            ],
        )
        for row in account.shares:
            out.append(
                insight.Level(
                    share_id=shares[row.key],
                    instance_type_id=snapshot.type_ids[name],
                    own=row.own,
                    borrowed=row.borrowed,
                    lent=row.lent,
                    idle=row.idle,
                )
            )
    return out


def unchanged(
    recorded: tuple[list[insight.Level], datetime] | None,
    found: Sequence[insight.Level],
    now: datetime,
) -> bool:
    """Whether recording ``found`` at ``now`` may wait: the levels this process last
    recorded for the queue (``recorded``: levels and when, None when not known) are the
    same and ``now`` is in the same minute. Recording later credits the same levels over
    the same interval; the first cycle of each minute still records, so the rollups lag
    the cycle by at most a minute, as ``insight.usage_record`` promises."""
    if recorded is None:
        return False
    levels, at = recorded
    return (
        levels == list(found)
        and now >= at
        and insight.bucket_start(at, UsageRollup.MINUTE)
        == insight.bucket_start(now, UsageRollup.MINUTE)
    )


def record(queue_id: int, found: Sequence[insight.Level], now: datetime) -> bool:
    """Record ``found`` (``levels``) at ``now``, in the caller's transaction; the history
    row's own lock keeps it right (a cycle recorded meanwhile for a later moment makes
    this one skip, never credit an interval twice). False: it could not be recorded."""
    try:
        insight.usage_record(queue_id=queue_id, levels=found, now=now)
    except DatabaseError:
        log.exception("usage history of queue %s not recorded", queue_id)
        return False
    return True


def record_alone(queue_id: int, found: Sequence[insight.Level], now: datetime) -> None:
    """``record`` in a transaction of its own (a cycle whose executor deferred it)."""
    with transaction.atomic():
        record(queue_id, found, now)
