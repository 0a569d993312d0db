"""Operators' metrics: what Prometheus scrapes from ``/metrics`` (docs/operations.md).

Two kinds of figure:

* **Gauges of the present** (per share and type: limit, usage, own, borrowed, lent, idle
  and pending jobs; per queue and type: capacity) are read at scrape time from the same
  usage figures the pages show (``selectors.capacity.queues_usage``, built on the one
  accounting function), cached under the stored state's fingerprint like the pages, so
  a scrape with nothing changed costs one query.
* **Counters and the cycle histogram** (admissions and preemptions by rule, executor
  errors, cycle durations) happen in Celery workers and web processes alike, so they
  cannot live in one process's memory: each event adds to one Redis hash (``HINCRBY``,
  one round trip), which every process shares and the scrape reads. Counting never
  fails the work it counts: with Redis away the increment is skipped. A Redis flush
  resets the counters, which Prometheus treats as a counter reset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)

# Upper bounds of the cycle duration histogram, in seconds.
CYCLE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PREFIX = "gpushare"

_client: Any = None
# After a failed call, Redis is left alone this long: a cycle never waits on a
# connection timeout per decision while Redis is away (as governance/cache.py does).
RETRY_AFTER_SECONDS = 5.0
_down_until = 0.0


def _redis() -> Any:
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1
        )
    return _client


def store_key() -> str:
    """The Redis hash of this database's counters (tests and benches use their own)."""
    return f"metrics:{connection.settings_dict['NAME']}"


def _available() -> bool:
    return time.monotonic() >= _down_until


def _failed() -> None:
    global _down_until
    _down_until = time.monotonic() + RETRY_AFTER_SECONDS
    log.debug("metrics store unreachable", exc_info=True)


def add(counts: Mapping[str, int | float]) -> None:
    """Add ``counts`` (field -> amount) to the shared counters; never raises."""
    if not counts or not _available():
        return
    try:
        pipe = _redis().pipeline(transaction=False)
        key = store_key()
        for name, amount in counts.items():
            if isinstance(amount, float):
                pipe.hincrbyfloat(key, name, amount)
            else:
                pipe.hincrby(key, name, amount)
        pipe.execute()
    except Exception:  # metrics must never fail a cycle or a report
        _failed()


def count_executor_error(kind: str) -> None:
    """A run the executor lost (``lost``) or reported failed (``failed``)."""
    add({f"executor_error:{kind}": 1})


def observe_cycle(
    seconds: float,
    admitted: Mapping[str, int] | None = None,
    preempted: Mapping[str, int] | None = None,
) -> None:
    """One scheduling cycle took ``seconds`` (non-cumulative bucket counts are stored),
    with its admissions by rule (own, borrow) and preemptions by rule (reclaim, priority,
    ...): one round trip to Redis per cycle."""
    bucket = next((f"{b:g}" for b in CYCLE_BUCKETS if seconds <= b), "+Inf")
    counts: dict[str, int | float] = {
        f"cycle_bucket:{bucket}": 1,
        "cycle_count": 1,
        "cycle_sum": float(seconds),
    }
    counts.update({f"admitted:{rule}": n for rule, n in (admitted or {}).items()})
    counts.update({f"preempted:{rule}": n for rule, n in (preempted or {}).items()})
    add(counts)


def read_counters() -> dict[str, float]:
    """Every shared counter (empty with Redis away)."""
    if not _available():
        return {}
    try:
        raw = _redis().hgetall(store_key())
    except Exception:
        _failed()
        return {}
    return {k.decode(): float(v) for k, v in raw.items()}


class Collector:
    """A prometheus-client collector: builds the metric families at each scrape."""

    def __init__(
        self,
        usage: list[Any],
        counters: Mapping[str, float],
        forecast_errors: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.usage = usage
        self.counters = counters
        self.forecast_errors = forecast_errors or {}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        share_labels = ["queue", "share", "team", "instance_type"]
        gauges = {
            name: GaugeMetricFamily(f"{PREFIX}_share_{name}", text, labels=share_labels)
            for name, text in (
                ("limit", "Instances the share may use without borrowing (its entitlement)."),
                ("usage", "Instances the share's running jobs hold."),
                ("own", "Instances used within the limit: min(usage, limit)."),
                ("borrowed", "Instances used beyond the limit, open to reclaim."),
                ("lent", "Idle entitlement of the share that borrowers use."),
                ("idle", "Entitlement the share does not use: max(0, limit - usage)."),
            )
        }
        pending = GaugeMetricFamily(
            f"{PREFIX}_share_pending_jobs",
            "Pending jobs of the share whose first preference is the type.",
            labels=share_labels,
        )
        capacity = GaugeMetricFamily(
            f"{PREFIX}_queue_capacity",
            "Instances of the type the queue can run now.",
            labels=["queue", "instance_type"],
        )
        for queue in self.usage:
            for totals in queue["types"]:
                capacity.add_metric([queue["name"], totals["instance_type"]], totals["capacity"])
            for share in queue["shares"]:
                for row in share["types"]:
                    labels = [
                        queue["name"],
                        share["name"],
                        share["team_name"],
                        row["instance_type"],
                    ]
                    for name, family in gauges.items():
                        family.add_metric(labels, row[name])
                    pending.add_metric(labels, row["pending"])
        yield from gauges.values()
        yield pending
        yield capacity

        errors_family = GaugeMetricFamily(
            f"{PREFIX}_forecast_error_seconds",
            "Actual first start against the first estimate, jobs started in the last 30 "
            "days: absolute error at quantile 0.5 and 0.9 (nearest rank).",
            labels=["queue", "quantile"],
        )
        for queue_name, figures in sorted(self.forecast_errors.items()):
            for quantile, key in (("0.5", "p50"), ("0.9", "p90")):
                if figures.get(key) is not None:
                    errors_family.add_metric([queue_name, quantile], figures[key])
        yield errors_family

        admissions = CounterMetricFamily(
            f"{PREFIX}_admissions", "Jobs admitted, by rule (own, borrow).", labels=["rule"]
        )
        preemptions = CounterMetricFamily(
            f"{PREFIX}_preemptions",
            "Jobs preempted, by rule (reclaim, priority, capacity_lost, ...).",
            labels=["rule"],
        )
        errors = CounterMetricFamily(
            f"{PREFIX}_executor_errors",
            "Runs an executor lost (lost) or reported failed (failed).",
            labels=["kind"],
        )
        for field, value in sorted(self.counters.items()):
            kind, _, label = field.partition(":")
            if kind == "admitted":
                admissions.add_metric([label], value)
            elif kind == "preempted":
                preemptions.add_metric([label], value)
            elif kind == "executor_error":
                errors.add_metric([label], value)
        yield admissions
        yield preemptions
        yield errors

        cumulative = 0.0
        buckets = []
        for bound in [*(f"{b:g}" for b in CYCLE_BUCKETS), "+Inf"]:
            cumulative += self.counters.get(f"cycle_bucket:{bound}", 0.0)
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            f"{PREFIX}_cycle_duration_seconds",
            "How long one scheduling cycle of a queue took (database read, engine, writes).",
            buckets=buckets,
            sum_value=self.counters.get("cycle_sum", 0.0),
        )
