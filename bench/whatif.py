"""What-if and signals benchmark: 30 days of 100,000 jobs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything .venv/bin/python bench/whatif.py \\
        [--jobs N]

The history is the oversubscribed trace of ``bench/engine.py`` (100,000 jobs arriving
over 30 days at an offered load of 1.0, with daily capacity dips) played through the
engine, then written to a throwaway database ``bench_whatif_<name>`` (``<name>`` being
the database named in ``DATABASE_URL``; dropped and re-created each run) as jobs, job
events and capacity-change audit entries, as the live scheduler would have left them.
Then it times, and prints:

1. ``export``: ``scheduler.history.export`` of the queue's 30 days (database -> scenario);
2. ``replay``: both sides of a what-if (the history as it was, and with one share's
   borrow limit and one type's capacity changed), through ``scheduler.whatif.run``
   (replays and the signals of both); target export + replay <= 60 s;
3. ``signals``: ``scheduler.signals.compute`` over the 30 days; target <= 2 s;
4. ``windows``: the signals the API answers (``selectors.scheduling.queue_signals``) for
   the last hour, day, 7 days and 30 days of the history (median of 3), each computed
   from the queue's recording with the state at the window's start, beside what the
   window's export alone took (``export`` + ``compute``, how they were read before).

Times are wall-clock on this machine, whatever else it is running: run it on a quiet one
(the signals' CPU time and the load average are printed too). The two sides replay in two
processes when the machine has two cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from throwaway import django_on_throwaway

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _setup_environment() -> None:
    django_on_throwaway("bench_whatif", DEMO_TIME_FACTOR="1")


def figure(label: str, seconds: float, target: float | None = None) -> None:
    verdict = ""
    if target is not None:
        verdict = f"   (target <= {target:g} s)  " + ("OK" if seconds <= target else "MISSED")
    print(f"  {label:<48} {seconds:>8.2f} s{verdict}", flush=True)


def load(data: dict, events: list[dict]) -> object:
    """Write the played history as the live scheduler would have left it."""
    from django.contrib.auth.models import User

    from governance.models import (
        AuditEvent,
        InstanceType,
        Job,
        JobEvent,
        JobQueue,
        QueueCapacity,
        Share,
        ShareLimit,
        Team,
    )
    from governance.services import audit

    def moment(seconds: float) -> datetime:
        return T0 + timedelta(seconds=seconds)

    types = {}
    for t in data["instance_types"]:
        types[t["name"]] = InstanceType.objects.create(
            name=t["name"], speed=t.get("speed", 1), hourly_price=t.get("hourly_price", 2.0)
        )
    queue = JobQueue.objects.create(name="bench")
    for t in data["instance_types"]:
        QueueCapacity.objects.create(
            queue=queue, instance_type=types[t["name"]], count=t["capacity"]
        )
    shares = {}
    for index, s in enumerate(data["shares"]):
        team = Team.objects.create(name=f"team-{index % 8}-{s['name']}")
        share = Share.objects.create(
            queue=queue,
            team=team,
            name=s["name"],
            policy=s.get("policy", "RESERVE"),
            borrow_limit=s.get("borrow_limit", -1),
            in_share_preemption=s.get("in_share_preemption", False),
            preemption_retries=s.get("preemption_retries"),
        )
        for type_name, count in s["limits"].items():
            ShareLimit.objects.create(share=share, instance_type=types[type_name], count=count)
        shares[s["name"]] = share
    capacity = {t["name"]: t["capacity"] for t in data["instance_types"]}
    for action in data.get("actions") or []:
        if action["type"] == "set_capacity":
            before = dict(capacity)
            capacity[action["instance_type"]] = action["capacity"]
            audit.record(
                event_type=AuditEvent.CAPACITY_CHANGED,
                actor=None,
                subject=queue,
                before={"capacity": before},
                after={"capacity": dict(capacity)},
                queue_id=queue.pk,
                at=moment(action["at"]),
            )
    for name, count in capacity.items():  # the capacity now is the last one set
        QueueCapacity.objects.filter(queue=queue, instance_type=types[name]).update(count=count)
    user = User.objects.create(username="bench")
    by_job: dict[str, list[dict]] = {}
    for event in events:
        by_job.setdefault(str(event["job"]), []).append(event)
    rows = []
    for raw in data["jobs"]:
        common = raw.get("count")
        prefs = [
            {"instance_type": p["instance_type"], "count": p.get("count", common)}
            for p in raw["preferences"]
        ]
        mine = by_job.get(str(raw["id"]), [])
        started = next((e["at"] for e in mine if e["type"] == "admitted"), None)
        final = mine[-1] if mine and mine[-1]["type"] != "admitted" else None
        states = {
            "completed": "SUCCEEDED",
            "failed": "FAILED",
            "timed_out": "TIMED_OUT",
            "cancelled": "CANCELLED",
        }
        state = states.get(final["type"], "PENDING") if final else "RUNNING" if mine else "PENDING"
        rows.append(
            Job(
                queue=queue,
                share=shares[raw["share"]],
                name=str(raw["id"]),
                submitter=user,
                priority=raw["priority"],
                preferences=prefs,
                count=common,
                max_pending=raw.get("max_pending"),
                checkpoint_interval=raw.get("checkpoint_interval"),
                duration=raw["duration"],
                restart_overhead=raw.get("restart_overhead", 0),
                state=state,
                submitted_at=moment(raw["submit_at"]),
                started_at=moment(started) if started is not None else None,
                finished_at=moment(final["at"]) if final else None,
            )
        )
    Job.objects.bulk_create(rows, batch_size=5000)
    ids = {job.name: job.pk for job in rows}
    event_rows = []
    run: dict[str, dict] = {}
    for event in events:
        key = str(event["job"])
        data_fields = {k: v for k, v in event.items() if k not in ("at", "type", "job")}
        if event["type"] == "admitted":
            run[key] = event
        if event["type"] == "preempted":
            data_fields["by"] = ids[str(event["by"])] if event.get("by") else None
            data_fields.pop("instance_type", None)
            data_fields.pop("count", None)
        event_rows.append(
            JobEvent(job_id=ids[key], at=moment(event["at"]), type=event["type"], data=data_fields)
        )
    JobEvent.objects.bulk_create(event_rows, batch_size=10000)
    return queue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    _setup_environment()
    import engine as bench_engine

    from scheduler import history, signals, simulate, whatif

    print(f"== what-if and signals, {args.jobs:,} jobs over 30 days ==", flush=True)
    data = bench_engine.oversubscribed_scenario(args.jobs, 1.0)
    started = time.perf_counter()
    played = simulate.run(data)
    print(
        f"  history played through the engine: {len(played['events']):,} events in "
        f"{time.perf_counter() - started:.1f} s; writing it to the database...",
        flush=True,
    )
    started = time.perf_counter()
    queue = load(data, played["events"])
    print(f"  written in {time.perf_counter() - started:.1f} s", flush=True)
    span = max(e["at"] for e in played["events"]) + 1  # the whole played history
    start, stop = T0 - timedelta(seconds=1), T0 + timedelta(seconds=span)

    t = time.perf_counter()
    exported = history.export(queue, start, stop)  # type: ignore[arg-type]
    export_s = time.perf_counter() - t
    print(
        f"  exported: {len(exported['scenario']['jobs']):,} jobs, "
        f"{len(exported['recorded']['events']):,} events",
        flush=True,
    )
    share = exported["scenario"]["shares"][0]["name"]
    first_type = exported["scenario"]["instance_types"][0]
    proposal = {
        "shares": {share: {"borrow_limit": -1, "policy": "LEND_AND_BORROW"}},
        "capacity": {first_type["name"]: first_type["capacity"] + 4},
    }
    t = time.perf_counter()
    result = whatif.run(exported, proposal)
    replay_s = time.perf_counter() - t
    rec = signals.Recording(exported["scenario"], exported["recorded"]["events"], exported["teams"])
    t, cpu = time.perf_counter(), time.process_time()
    signals.compute(rec, 0, exported["scenario"]["until"] + 1)
    signals_s, signals_cpu = time.perf_counter() - t, time.process_time() - cpu
    print(
        f"  replayed: {result['events']['baseline']:,} and {result['events']['proposed']:,} events",
        flush=True,
    )
    figure("export (database -> scenario)", export_s)
    figure("replay both sides + their signals", replay_s)
    figure("export + replay both sides", export_s + replay_s, 60)
    figure("signals for the 30 days", signals_s, 2)
    figure("  the same, CPU time of this process", signals_cpu)
    windows(queue, stop)
    print(f"  (load average while it ran: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


def windows(queue: object, stop: datetime) -> None:
    """The signals of the last hour, day, 7 and 30 days as the API computes them, and
    from the window's export alone (the jobs going at its start as if submitted then)."""
    import statistics

    from governance.selectors import scheduling
    from scheduler import history, signals

    def by_export(start: datetime) -> None:
        exported = history.export(queue, start, stop)  # type: ignore[arg-type]
        length = int((stop - start).total_seconds() * 1000)
        rec = signals.Recording(
            exported["scenario"],
            exported["recorded"]["events"],
            exported["teams"],
            audit=history.policy_entries(queue, start, stop),  # type: ignore[arg-type]
        )
        signals.compute(rec, 0, length)

    for label, span in (("1 hour", 1 / 24), ("1 day", 1), ("7 days", 7), ("30 days", 30)):
        start = stop - timedelta(days=span)
        times: dict[str, list[float]] = {"window": [], "export": []}
        for _ in range(3):
            t = time.perf_counter()
            scheduling.queue_signals(queue, start, stop)  # type: ignore[arg-type]
            times["window"].append(time.perf_counter() - t)
            t = time.perf_counter()
            by_export(start)
            times["export"].append(time.perf_counter() - t)
        figure(f"signals, last {label} (the API's)", statistics.median(times["window"]))
        figure("  from the window's export alone", statistics.median(times["export"]))


if __name__ == "__main__":
    main()
