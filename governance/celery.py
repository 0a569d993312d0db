"""The Celery application: workers run the scheduler, beat runs the safety net.

Redis only carries "please run a cycle" messages; the database is the source of truth. So
the worker must outlive any Redis outage and pick up again as soon as Redis is back:

- ``broker_connection_max_retries = None`` (settings): it never gives up reconnecting;
- :class:`PromptReconnectConsumer`: it retries every second instead of Celery's 2, 4, 6 ...
  30 s, so work resumes within a second or two of Redis returning, not up to 30 s later;
- ``governance.broker``: kombu's Redis transport fails with "'NoneType' object has no
  attribute 'hostname'" when a task in progress outlives the lost connection, which ends
  the worker; its fixed subclass serves every ``redis`` broker URL;
- :func:`_keep_connections`: each task starts and ends with Django's check of its kept
  database connection (``CONN_MAX_AGE``, ``CONN_HEALTH_CHECKS``), as each web request
  does, rather than Celery's close of it: reconnecting cost every cycle a new
  PostgreSQL backend with cold caches, about 7% of a busy worker's time;
- :func:`_freeze_start_up`: what the worker built before its first task is kept out of
  the cyclic collector's sight, as ``scripts/gunicorn_conf.py`` does for the web;
- the run command and the documented units start the worker ``--without-gossip
  --without-mingle --without-heartbeat``: those steps serve clusters of workers that
  watch one another, and restarting them after a broker loss is more of the same code.
"""

from __future__ import annotations

import gc
import os
from typing import Any

from celery import Celery, signals
from celery.worker.consumer import Consumer
from django.db import close_old_connections

from governance import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governance.settings")

# Seconds between two attempts to reach the broker after it went away.
RECONNECT_INTERVAL_SECONDS = 1.0


class PromptReconnectConsumer(Consumer):
    """Celery's consumer, retrying a lost broker every second for as long as it takes."""

    def ensure_connected(self, conn: Any) -> Any:
        ensure = conn.ensure_connection

        def ensure_promptly(*args: Any, **kwargs: Any) -> Any:
            kwargs.update(
                interval_start=RECONNECT_INTERVAL_SECONDS,
                interval_step=0,
                interval_max=RECONNECT_INTERVAL_SECONDS,
            )
            return ensure(*args, **kwargs)

        # Celery calls conn.ensure_connection() with kombu's default intervals and offers
        # no setting for them: this connection object gets the prompt ones.
        conn.ensure_connection = ensure_promptly
        return super().ensure_connected(conn)


@signals.task_prerun.connect(dispatch_uid="governance.keep_connections.prerun")
@signals.task_postrun.connect(dispatch_uid="governance.keep_connections.postrun")
def _keep_connections(sender: Any = None, **_: Any) -> None:
    """Drop a kept connection that broke or outlived ``CONN_MAX_AGE`` (settings
    ``CELERY_DB_REUSE_MAX`` stops Celery closing every one). A task run eagerly runs
    inside its caller's request or transaction: its connection is the caller's."""
    if sender is not None and getattr(sender.request, "is_eager", False):
        return
    close_old_connections()


@signals.worker_ready.connect(dispatch_uid="governance.freeze_start_up")
def _freeze_start_up(**_: Any) -> None:
    """The worker is ready: Django, Celery and every module are loaded (about 150,000
    objects), and none of them will be garbage. Frozen, they are left out of every full
    collection from now on, which otherwise walked them all: about 100 ms in which no
    cycle ran, once every few hundred cycles (8 ms frozen, measured in-process)."""
    gc.freeze()


broker.use_for_redis_urls()
app = Celery("governance")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["scheduler", "governance"])
