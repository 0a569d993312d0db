"""kombu's Redis transport, with one fix: a released channel fails like a lost connection.

When Redis goes away while a task is running (its message delivered, acknowledged only
when the task ends: ``acks_late``), Celery releases the broken connection, which clears
the transport's link to its connection parameters. Two things may still use the old
channel afterwards: closing it again (it requeues its unacknowledged messages) and the
late acknowledgement of the running task. Both build a new Redis client from those
parameters, and stock kombu fails there with ``AttributeError: 'NoneType' object has no
attribute 'hostname'``, which Celery treats as unrecoverable: the worker exits (with a
host and port or a unix socket alike; seen in tests/faults/test_broker_outage.py).

Here the same situation raises redis-py's ``ConnectionError``, which kombu and Celery
already handle for a dead broker: the close is skipped, the acknowledgement is logged as
not delivered (Redis requeues the message after its visibility timeout; the scheduler's
tasks are idempotent), and the worker carries on reconnecting.

``governance.celery`` makes this the transport behind ``redis://``, ``rediss://`` and
``redis+socket://`` broker URLs.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("this broker channel's connection was released")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]


class Transport(kombu_redis.Transport):
    Channel = Channel


def use_for_redis_urls() -> None:
    """Resolve the ``redis`` and ``rediss`` URL schemes to :class:`Transport`."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
