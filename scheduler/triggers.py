"""Requests for scheduling cycles, coalesced in Redis, never failing the caller.

The database is the source of truth: a request that cannot reach Redis is only logged,
because beat's safety net schedules every queue every few seconds anyway. A burst of
changes to one queue sends one cycle task, not one per change: the first request sets a
flag that the cycle clears when it starts, and requests made while it is set add nothing.

Every request is numbered (per queue, in Redis), and a cycle records, as it starts, the
number of the latest request made by then: it covers every request up to that one, since
each was made after its change committed, and the cycle reads after that. A cycle task
whose request a cycle has covered since is dropped at once. Without that, a worker
falling behind would keep running stale tasks: a flag outlives its time-to-live while
its task waits in a long broker queue, and a new request then sends a second task for the
same changes, so the busiest queues fill the broker queue and the others wait behind them
(``bench/scale.py`` saw 18 tasks of one queue waiting at once, and a queue wait 11 s).

A time-driven event (a completion or a time-out due later) is a request made in the
future: a timer task that, when due, makes an ordinary request, which takes its turn
behind the other queues' instead of running a cycle ahead of them on the worker holding
the timer.
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
COUNT_KEY = "scheduler:cycle-count:{queue_id}"
"""A hash: ``asked``, the number of the queue's latest request; ``covered``, the latest
request a started cycle covers. Both go together (one key), so a Redis that lost its data
starts both again from nothing."""
FLAG_TTL_SECONDS = 5  # a lost cycle task delays the next request at most this long
CYCLE_TASK = "scheduler.tasks.schedule_queue"
TIMER_TASK = "scheduler.tasks.cycle_timer"
"""The tasks, by name: the tasks module calls this one, so it is not imported here."""

# A cycle starting: whether request ARGV[1] ('' for none) is still to serve; if so, the
# cycle covers every request made so far, the request flag goes, and so does a timer due
# by ARGV[2] (the cycle serves it).
_STARTING = """
local asked = tonumber(redis.call('HGET', KEYS[1], 'asked') or '0')
local covered = tonumber(redis.call('HGET', KEYS[1], 'covered') or '0')
if ARGV[1] ~= '' and tonumber(ARGV[1]) <= covered then
    return 0
end
if asked > covered then
    redis.call('HSET', KEYS[1], 'covered', asked)
end
redis.call('DEL', KEYS[2])
local timer = redis.call('GET', KEYS[3])
if timer and tonumber(timer) <= tonumber(ARGV[2]) then
    redis.call('DEL', KEYS[3])
end
return 1
"""


def _send(task: str, queue_id: int, *args: object, countdown: float = 0.0) -> None:
    current_app.signature(task, args=(queue_id, *args)).apply_async(
        countdown=countdown, retry=False
    )


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5, retry_on_timeout=False
    )


@cache
def _starting() -> object:
    return client().register_script(_STARTING)


def request_cycle(queue_id: int) -> bool:
    """Ask for a cycle of ``queue_id`` soon; False when Redis could not be reached."""
    try:
        pipe = client().pipeline()
        pipe.hincrby(COUNT_KEY.format(queue_id=queue_id), "asked", 1)
        pipe.set(PENDING_KEY.format(queue_id=queue_id), 1, nx=True, ex=FLAG_TTL_SECONDS)
        asked, first = pipe.execute()
        if first:
            _send(CYCLE_TASK, queue_id, asked)
        return True
    except Exception:  # Redis or the broker is down: beat's safety net catches up.
        log.warning("could not request a cycle for queue %s; the safety net will", queue_id)
        return False


def cycle_starting(queue_id: int, asked: int | None = None) -> bool:
    """A cycle task of ``queue_id`` is about to run for request ``asked`` (None: run
    whatever came before, as beat's safety net asks): False when a cycle that started
    since covered it (drop the task). Otherwise the cycle covers every request made so
    far and clears the request flag, so changes from now on ask for the next cycle."""
    try:
        script = _starting()
        keys = [k.format(queue_id=queue_id) for k in (COUNT_KEY, PENDING_KEY, TIMER_KEY)]
        args = ["" if asked is None else int(asked), time.time() + 0.05]
        return bool(script(keys=keys, args=args))  # type: ignore[operator]
    except Exception:  # without Redis, run the cycle: an extra one is harmless
        log.warning("could not record the start of a cycle of queue %s", queue_id)
        return True


def request_cycle_at(queue_id: int, seconds: float) -> None:
    """Ask for a cycle in ``seconds`` (a completion or a timeout is due then).

    One timer per queue: a later request is dropped while an earlier or equal one waits,
    and none is set while a cycle already asked for has yet to start: that cycle sets
    the timer it needs (on a busy queue that spares a timer task per cycle).
    """
    due = time.time() + seconds
    key = TIMER_KEY.format(queue_id=queue_id)
    try:
        pipe = client().pipeline(transaction=False)
        pipe.get(key)
        pipe.exists(PENDING_KEY.format(queue_id=queue_id))
        current, asked = pipe.execute()
        if asked or (current is not None and float(current) <= due + 0.05):
            return
        client().set(key, due, ex=max(1, int(seconds) + 5))
        _send(TIMER_TASK, queue_id, countdown=max(0.0, seconds))
    except Exception:
        log.warning("could not set a timer for queue %s", queue_id)
