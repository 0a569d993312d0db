"""Requests for scheduling cycles, coalesced in Redis, never failing the caller.

The database is the source of truth: a request that cannot reach Redis is only logged,
because beat's safety net schedules every queue every few seconds anyway. A burst of
changes to one queue sends one cycle task, not one per change: the first request sets a
flag that the cycle clears when it starts, and requests made while it is set add nothing.
"""

from __future__ import annotations

import logging
import time
from functools import cache

import redis
from celery import current_app
from django.conf import settings

log = logging.getLogger(__name__)

PENDING_KEY = "scheduler:cycle-requested:{queue_id}"
TIMER_KEY = "scheduler:cycle-timer:{queue_id}"
FLAG_TTL_SECONDS = 5  # a lost cycle task delays the next request at most this long
CYCLE_TASK = "scheduler.tasks.schedule_queue"
"""The cycle task, by name: the tasks module calls this one, so it is not imported here."""


def _send_cycle(queue_id: int, countdown: float | None = None) -> None:
    current_app.signature(CYCLE_TASK, args=(queue_id,)).apply_async(
        countdown=countdown or 0.0, retry=False
    )


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5, retry_on_timeout=False
    )


def request_cycle(queue_id: int) -> bool:
    """Ask for a cycle of ``queue_id`` soon; False when Redis could not be reached."""
    try:
        if client().set(PENDING_KEY.format(queue_id=queue_id), 1, nx=True, ex=FLAG_TTL_SECONDS):
            _send_cycle(queue_id)
        return True
    except Exception:  # Redis or the broker is down: beat's safety net catches up.
        log.warning("could not request a cycle for queue %s; the safety net will", queue_id)
        return False


def cycle_started(queue_id: int) -> None:
    """Clear the request flag, so changes from now on ask for the next cycle."""
    try:
        client().delete(PENDING_KEY.format(queue_id=queue_id))
    except Exception:
        log.warning("could not clear the cycle flag of queue %s", queue_id)


def request_cycle_at(queue_id: int, seconds: float) -> None:
    """Ask for a cycle in ``seconds`` (a completion or a timeout is due then).

    One timer per queue: a later request is dropped while an earlier or equal one waits.
    """
    due = time.time() + seconds
    key = TIMER_KEY.format(queue_id=queue_id)
    try:
        current = client().get(key)
        if current is not None and float(current) <= due + 0.05:
            return
        client().set(key, due, ex=max(1, int(seconds) + 5))
        _send_cycle(queue_id, countdown=max(0.0, seconds))
    except Exception:
        log.warning("could not set a timer for queue %s", queue_id)


def timer_fired(queue_id: int) -> None:
    try:
        key = TIMER_KEY.format(queue_id=queue_id)
        current = client().get(key)
        if current is not None and float(current) <= time.time() + 0.05:
            client().delete(key)
    except Exception:
        log.warning("could not clear the timer of queue %s", queue_id)
