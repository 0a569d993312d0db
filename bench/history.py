"""Usage history benchmark: one chart's data over 30 days of 100,000 jobs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything \\
    BENCH_REDIS_URL=redis://127.0.0.1:6379/9 .venv/bin/python bench/history.py [--jobs N]

Runs in a throwaway database ``bench_history_<name>`` on the ``DATABASE_URL`` server
(dropped and re-created each run). Steps:

1. plays the 30-day oversubscribed trace of ``bench/engine.py`` (100,000 jobs, 20
   shares over 5 types, offered load 1.3, daily capacity dips) through the engine with
   the scenario runner;
2. turns its events into the rollups the live cycle writes: per share and type, own,
   borrowed, lent and idle from the one accounting function at every instant something
   changed, spread into six-hour buckets over the 30 days and minute and quarter-hour
   buckets over the last two days (their retention) by ``services.insight.spread``, the cycle's own
   function; the trace's end is placed at now, and the rows are loaded with COPY;
3. times what the pages ask (``selectors.insight.usage_history``): the queue's chart
   data for the last hour, day and 30 days, one share's, and the overview's (every
   queue), median of 5 runs each, target <= 200 ms; and the cycle's write
   (``services.insight.usage_record``) with 100 share-type levels, over ten minutes of
   cycles 5 s apart (the credit is kept pending within a minute and written once a
   minute).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import figure, heading  # noqa: E402

TARGET_MS = 200.0


def _setup() -> None:
    """A throwaway database ``bench_history_<name>`` on the DATABASE_URL server, migrated."""
    import os

    from throwaway import django_on_throwaway

    name, _ = django_on_throwaway(
        "bench_history", REDIS_URL=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
    )
    print(f"database {name}")


def play(n_jobs: int) -> tuple[dict[str, Any], dict[str, Any], float]:
    from bench.engine import oversubscribed_scenario
    from scheduler import simulate

    data = oversubscribed_scenario(n_jobs, 1.3)
    start = time.perf_counter()
    result = simulate.run(data)
    return data, result, time.perf_counter() - start


def integrate(
    data: dict[str, Any],
    result: dict[str, Any],
    share_ids: dict[str, int],
    type_ids: dict[str, int],
    base: datetime,
    end: int,
) -> dict[tuple[int, int, int, datetime], list[float]]:
    """The rollups of the trace, as the cycle would have written them."""
    from governance.models import UsageRollup
    from governance.services.insight import Level, spread
    from scheduler.engine.accounting import ShareOnType, account_type

    shares = data["shares"]
    capacity = {t["name"]: t["capacity"] for t in data["instance_types"]}
    usage: dict[tuple[str, str], int] = {}
    running: dict[str, tuple[str, int]] = {}
    share_of = {j["id"]: j["share"] for j in data["jobs"]}
    cutoff = end - 2 * 86400
    changes: dict[int, list[tuple[str, Any]]] = {}
    for event in result["events"]:
        changes.setdefault(event["at"], []).append(("event", event))
    for action in data.get("actions") or []:
        if action["type"] == "set_capacity":
            changes.setdefault(action["at"], []).append(("capacity", action))
    out: dict[tuple[int, int, int, datetime], list[float]] = {}
    levels: dict[str, list[Level]] = {t: [] for t in capacity}
    last: dict[str, int] = dict.fromkeys(capacity, 0)

    def flush(type_name: str, until: int) -> None:
        since = last[type_name]
        if until > since and levels[type_name]:
            begin, finish = base + timedelta(seconds=since), base + timedelta(seconds=until)
            part = spread(levels[type_name], begin, finish, (UsageRollup.SIX_HOURS,))
            if until > cutoff:  # minute and quarter rollups are kept for two days only
                recent = base + timedelta(seconds=max(since, cutoff))
                short = (UsageRollup.MINUTE, UsageRollup.QUARTER)
                part.update(spread(levels[type_name], recent, finish, short))
            for key, values in part.items():
                into = out.setdefault(key, [0.0, 0.0, 0.0, 0.0])
                for i in range(4):
                    into[i] += values[i]
        last[type_name] = until

    def recount(type_name: str) -> None:
        account = account_type(
            capacity[type_name],
            [
                ShareOnType(
                    s["name"],
                    s.get("policy", "RESERVE"),
                    s["limits"].get(type_name),
                    usage.get((s["name"], type_name), 0),
                )
                for s in shares
            ],
        )
        levels[type_name] = [
            Level(share_ids[r.key], type_ids[type_name], r.own, r.borrowed, r.lent, r.idle)
            for r in account.shares
            if r.own or r.borrowed or r.lent or r.idle
        ]

    for type_name in capacity:
        recount(type_name)
    for at in sorted(changes):
        touched: set[str] = set()
        for kind, item in changes[at]:
            if kind == "capacity":
                capacity[item["instance_type"]] = item["capacity"]
                touched.add(item["instance_type"])
                continue
            job_id = item["job"]
            if item["type"] == "admitted":
                running[job_id] = (item["instance_type"], item["count"])
                key = (share_of[job_id], item["instance_type"])
                usage[key] = usage.get(key, 0) + item["count"]
                touched.add(item["instance_type"])
            elif item["type"] in ("preempted", "completed", "cancelled") and job_id in running:
                type_name, count = running.pop(job_id)
                key = (share_of[job_id], type_name)
                usage[key] -= count
                touched.add(type_name)
        for type_name in sorted(touched):
            flush(type_name, at)
            recount(type_name)
    for type_name in capacity:
        flush(type_name, end)
    return out


def load_rows(queue_id: int, rows: dict[tuple[int, int, int, datetime], list[float]]) -> None:
    from django.db import connection

    from governance.models import UsageRollup

    table = UsageRollup._meta.db_table
    columns = "queue_id, share_id, instance_type_id, width, start, own, borrowed, lent, idle"
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for (share_id, type_id, width, start), values in rows.items():
                copy.write_row((queue_id, share_id, type_id, width, start, *values))
        cursor.execute(f"ANALYZE {table}")


def timed(fn: Any, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    _setup()
    from django.utils import timezone

    from governance.models import InstanceType, JobQueue, Share, Team, UsageRollup
    from governance.selectors import insight
    from governance.services.insight import Level, usage_record

    heading(f"usage history: {args.jobs:,} jobs over 30 days")
    data, result, seconds = play(args.jobs)
    figure("trace played (engine)", f"{seconds:.1f} s")
    figure("events", f"{len(result['events']):,}")

    queue = JobQueue.objects.create(name="bench-history")
    type_ids = {
        t["name"]: InstanceType.objects.create(name=t["name"]).pk for t in data["instance_types"]
    }
    share_ids = {}
    for s in data["shares"]:
        team = Team.objects.create(name=s["name"])
        share_ids[s["name"]] = Share.objects.create(
            queue=queue, team=team, name=s["name"], policy=s.get("policy", "RESERVE")
        ).pk
    last_event = max(e["at"] for e in result["events"])
    end = max(last_event, 30 * 86400)
    now = timezone.now()
    base = now - timedelta(seconds=end)
    start = time.perf_counter()
    rows = integrate(data, result, share_ids, type_ids, base, end)
    figure("rollups computed from the events", f"{time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    load_rows(queue.pk, rows)
    figure("rollup rows loaded (COPY)", f"{len(rows):,} in {time.perf_counter() - start:.1f} s")
    for width in (UsageRollup.MINUTE, UsageRollup.QUARTER, UsageRollup.SIX_HOURS):
        count = UsageRollup.objects.filter(width=width).count()
        figure(f"  of which {width} s wide", f"{count:,}")

    heading("one chart's data (median of 5)")
    one_share = next(iter(share_ids.values()))
    for key in ("hour", "day", "30d"):
        ms = timed(lambda k=key: insight.usage_history(queue_id=queue.pk, window_key=k, now=now))
        figure(f"queue, {key}", f"{ms:.1f} ms", f"<= {TARGET_MS:.0f} ms", ms <= TARGET_MS)
    ms = timed(
        lambda: insight.usage_history(
            queue_id=queue.pk, window_key="30d", share_ids=[one_share], now=now
        )
    )
    figure("one share, 30d", f"{ms:.1f} ms", f"<= {TARGET_MS:.0f} ms", ms <= TARGET_MS)
    ms = timed(lambda: insight.usage_history(queue_id=None, window_key="30d", now=now))
    figure("overview (every queue), 30d", f"{ms:.1f} ms", f"<= {TARGET_MS:.0f} ms", ms <= TARGET_MS)
    month = insight.usage_history(queue_id=queue.pk, window_key="30d", now=now)
    hours = sum(t["hours"]["own"] + t["hours"]["borrowed"] for t in month["types"])
    figure("instance-hours used in the 30 days", f"{hours:,.0f}")

    heading("the cycle's write (usage_record, 100 levels)")
    levels = [
        Level(sid, tid, 1, 1, 0, 1) for sid in list(share_ids.values()) for tid in type_ids.values()
    ]
    moment = [now + timedelta(seconds=1)]

    def write() -> None:
        moment[0] += timedelta(seconds=5)
        usage_record(queue_id=queue.pk, levels=levels, now=moment[0])

    times = []
    for _ in range(120):  # ten minutes of cycles 5 s apart (the safety net's pace)
        start = time.perf_counter()
        write()
        times.append((time.perf_counter() - start) * 1000)
    figure("per cycle, mean of 120 (5 s apart)", f"{statistics.mean(times):.1f} ms")
    figure("  median (credit kept pending)", f"{statistics.median(times):.1f} ms")
    figure("  max (a minute's rollups written)", f"{max(times):.1f} ms")


if __name__ == "__main__":
    main()
