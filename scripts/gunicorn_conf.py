"""Gunicorn settings for the web server, shared by ``./scripts/run`` and production.

``gunicorn -c scripts/gunicorn_conf.py governance.wsgi`` (docs/operations.md). Each value
can be changed through the environment variable named beside it.

Threads rather than more processes: a request mostly waits on PostgreSQL, so a few
threads per process serve many clients in little memory, and the default (2 processes x
8 threads) keeps up with 50 clients at once on two cores. Connections beyond that wait in
the listen backlog instead of being reset.
"""

import gc
import os

bind = f"{os.environ.get('WEB_BIND', '0.0.0.0')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("WEB_THREADS", "8"))
worker_class = "gthread"
# Load the application once in the master, before it listens: the port opens when the
# site can answer, and a replaced worker (crash, recycling) forks ready in milliseconds.
preload_app = True
backlog = 2048
# No SO_REUSEPORT: a second server on the same port must fail loudly, not share the port.
# After a crash the workers of the dead server notice within a second that their parent is
# gone and exit; the new one retries binding meanwhile.
reuse_port = False
# Gunicorn's control socket (one per user by default) would be shared by every instance.
control_socket_disable = True
# A request running longer than this is a stuck worker: it is killed and replaced.
timeout = int(os.environ.get("WEB_TIMEOUT", "60"))
graceful_timeout = 10
keepalive = 5
# Recycle each process now and then (jittered so they do not all go at once).
max_requests = 5000
max_requests_jitter = 500
accesslog = "-" if os.environ.get("WEB_ACCESS_LOG", "1") != "0" else None
errorlog = "-"
loglevel = os.environ.get("WEB_LOG_LEVEL", "info")
proc_name = "governance-web"


def pre_fork(server: object, worker: object) -> None:
    """In the master, just before a worker is forked: what the master has built by now (the
    preloaded application, its modules, settings, URL patterns: about 150,000 objects) is
    kept out of the cyclic collector's sight. A worker's full collection then walks only
    what it made itself: 8 ms instead of 100 ms, a pause that stopped every thread of the
    process about once per 2,000 submissions (measured in-process, ``gc.callbacks``); the
    pages stay shared with the master instead of being copied as the collector touches
    them."""
    gc.freeze()
