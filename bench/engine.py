"""Engine benchmark: ``python bench/engine.py
[--only cycles|constrained|trace|oversub|deep] [--quick]``.

Prints one cycle's time for 1,000 / 10,000 / 50,000 pending jobs with 5,000 running and
100,000 pending with 10,000 running; the same cycle at 10,000 and 50,000 pending without
and with every job using the interruption classes and constrained fallback
(``may_borrow``, ``preemptible``, ``deadline``, ``max_cost``, ``runtime`` per
preference); a whole simulation's throughput (events per second) for a 100,000-job
trace (``--trace-jobs N``, ``--profile``); and the oversubscribed traces
(``oversubscribed_scenario``) at offered loads 1.0, 1.3 and 2.0 of capacity, each at
10,000 and 100,000 jobs (``--oversub-jobs N``, ``--load X``, repeatable), with events
per second, the deepest backlog reached and the time of ``schedule`` calls at that
depth, and the ratio of events per second between the sizes; and the deep, varied
traces (``deep_scenario``: 100,000 jobs over 30 days, hour-long lognormal durations,
lists of up to five preferences) at offered loads 1.3, 2.0 and 3.0 (``--deep-jobs N``,
``--deep-load X``; target 12,000 events/s; each prints a digest of its result, which a
change of speed alone must leave as it was). ``--quick`` runs only the oversubscribed
traces at 10,000 and 20,000 jobs (with ``--only deep``: the deep ones at 20,000 jobs).
Seeded, so figures are comparable run to run.

Workload (both parts): 20 shares with 1 to 5 limits over 5 instance types, random
policies (RESERVE / LEND / LEND_AND_BORROW), borrow limits (-1, 0, 50, 100, 200 %),
in-share preemption on for about half, retries None/3/10; jobs with preference lists of
1 to 5 types (their share's types plus two random ones, so some preferences have no
limit), counts 1/1/1/2/2/4/8, priorities 0 to 100.

Cycle state: a busy queue reached *by the rules*. Limits are drawn at scale 400 per
5,000 running jobs; capacity per type is the sum of the shares' limits on it; 1.6 candidate
jobs per running job (one preference each, on a type of their share, count 1 or 2) are
submitted to an engine and admitted by ``schedule``; the first ``running`` admitted are
restored as RUNNING (random priorities, start times, checkpoint intervals) in a fresh
engine whose capacity per type is what they hold plus 2%. So every share is within its
limit or borrow cap and capacity is respected, as in a real cluster; the measured cycle
then admits into the remaining slack and carries out the reclaims and in-share
preemptions the rules call for (it is not a no-op). Then the pending jobs are submitted
and one ``schedule`` call (all its cycles) is timed, and then one more instant with a
single new job. Sizes: 1,000 / 10,000 / 50,000 pending with 5,000 running, and 100,000
pending with 10,000 running.

Trace: shares at scale 40, capacity per type ``3/4 * sum of limits + 5``; job arrival
gaps are exponential with a mean chosen so that the offered load (mean count x mean
duration / mean gap) equals the total capacity: a cluster running near, and around, its
capacity, where the queue grows and drains rather than growing without bound. Durations
30 to 3,000 s, checkpoints None/60/300, restart overhead 0/10, a third of the jobs have a
max pending time of one hour.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import json
import math
import pstats
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler import simulate
from scheduler.engine import (
    Decision,
    DecisionKind,
    Engine,
    InstanceType,
    Job,
    JobState,
    Policy,
    Preference,
    ShareConfig,
)

TYPES = ["ml.g5.xlarge", "ml.g5.12xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.trn1.32xlarge"]
POLICIES = [Policy.RESERVE, Policy.LEND, Policy.LEND_AND_BORROW]
COUNTS = [1, 1, 1, 2, 2, 4, 8]


def make_shares(rng: random.Random, scale: int) -> list[ShareConfig]:
    shares = []
    for i in range(20):
        chosen = rng.sample(TYPES, rng.randint(1, 5))
        shares.append(
            ShareConfig(
                name=f"team{i:02d}",
                limits={t: rng.randint(0, scale) for t in chosen},
                policy=rng.choice(POLICIES),
                borrow_limit=rng.choice([-1, 0, 50, 100, 200]),
                in_share_preemption=rng.random() < 0.5,
                preemption_retries=rng.choice([None, 3, 10]),
            )
        )
    return shares


def make_prefs(rng: random.Random, share: ShareConfig) -> tuple[Preference, ...]:
    types = list(share.limits) + rng.sample(TYPES, 2)
    chosen = rng.sample(sorted(set(types)), rng.randint(1, min(5, len(set(types)))))
    return tuple(Preference(t, rng.choice(COUNTS)) for t in chosen)


def _running_by_rules(
    rng: random.Random, shares: list[ShareConfig], running: int
) -> tuple[list[Job], dict[str, int]]:
    """Admit candidate jobs with the engine itself and keep the first ``running``."""
    capacity = {t: sum(s.limits.get(t, 0) for s in shares) for t in TYPES}
    filler = Engine([InstanceType(t, capacity[t]) for t in TYPES], shares)
    candidates: dict[str, Job] = {}
    for i in range(running * 8 // 5):
        share = rng.choice(shares)
        itype = rng.choice(list(share.limits))
        job = Job(
            f"r{i}", share.name, rng.randint(0, 100), 0, (Preference(itype, rng.choice([1, 1, 2])),)
        )
        candidates[job.id] = job
        filler.submit(job)
    admitted = [d.job for d in filler.schedule(0) if d.kind == DecisionKind.ADMITTED][:running]
    held: dict[str, int] = dict.fromkeys(TYPES, 0)
    jobs = []
    for job_id in admitted:
        src = filler.job(job_id)
        assert src.instance_type is not None
        held[src.instance_type] += src.count
        jobs.append(
            Job(
                job_id,
                src.share,
                src.priority,
                0,
                src.preferences,
                checkpoint_interval=rng.choice([None, 60, 300]),
                state=JobState.RUNNING,
                instance_type=src.instance_type,
                count=src.count,
                preference=0,
                run_started_at=rng.randint(0, 500),
                started_at=0,
            )
        )
    return jobs, held


def cycle_state(
    pending: int, running: int = 5000, seed: int = 1, constrained: str | None = None
) -> Engine:
    """A busy queue reached by the rules (see the module docstring). Limits scale with
    the running jobs (400 per 5,000), so every size is equally full. ``constrained``:
    the same queue with every job using the interruption classes and constrained
    fallback, ``"loose"`` (fields that rule nothing out) or ``"binding"``
    (:func:`constrain`)."""
    rng = random.Random(seed)
    shares = make_shares(rng, 400 * running // 5000)
    jobs, held = _running_by_rules(rng, shares, running)
    prices = [1.41, 7.09, 37.69, 98.32, 24.72]
    capacity = {t: held[t] + held[t] // 50 for t in TYPES}
    engine = Engine(
        [InstanceType(t, capacity[t], hourly_price=p) for t, p in zip(TYPES, prices, strict=True)],
        shares,
    )
    extra = random.Random(seed + 1000)  # apart, so the queue itself is the same
    if constrained is not None:
        for job in jobs:
            job.preemptible = constrained == "loose" or extra.random() < 0.5
    engine.restore(jobs)
    for i in range(pending):
        share = rng.choice(shares)
        job = Job(
            f"p{i}",
            share.name,
            rng.randint(0, 100),
            rng.randint(0, 900),
            make_prefs(rng, share),
        )
        if constrained is not None:
            constrain(extra, job, constrained == "binding")
        engine.submit(job)
    return engine


def constrain(rng: random.Random, job: Job, binding: bool) -> None:
    """Give a pending job every field of constrained fallback and a run time per
    preference (10 min to 10 h). ``binding``: a third may not borrow, and a deadline
    and a budget leave about half of its preferences eligible at the measured instant,
    some ruled out later; otherwise none of them rules anything out."""
    job.may_borrow = not binding or rng.random() >= 1 / 3
    job.preferences = tuple(
        Preference(p.instance_type, p.count, p.plan, rng.randint(600, 36_000))
        for p in job.preferences
    )
    job.deadline = 1000 + (rng.randint(600, 36_000) if binding else 10**9)
    job.max_cost = rng.choice([50, 200, 1000, 5000]) if binding else 10**9


def bench_constrained(sizes: list[tuple[int, int]], repeats: int = 7) -> None:
    """One ``schedule`` call of the same queue without the interruption classes and
    constrained fallback, with every job using fields that rule nothing out (the same
    decisions: the cost of the rules themselves), and with binding ones (other
    decisions): the median and the best of ``repeats`` fresh states each, interleaved,
    after a garbage collection (a cycle takes milliseconds: the machine's noise is of
    the same order, so one timing says little)."""
    variants: tuple[str | None, ...] = (None, "loose", "binding")
    for pending, running in sizes:
        times: dict[str | None, list[float]] = {v: [] for v in variants}
        made: dict[str | None, int] = {}
        for _ in range(repeats):
            for variant in variants:
                engine = cycle_state(pending, running, constrained=variant)
                gc.collect()
                start = time.perf_counter()
                made[variant] = len(engine.schedule(1000))
                times[variant].append(time.perf_counter() - start)
        med = {v: statistics.median(t) * 1000 for v, t in times.items()}
        low = {v: min(t) * 1000 for v, t in times.items()}
        print(
            f"constrained: {pending:>6} pending + {running} running, median (best) of "
            f"{repeats}: without the fields {med[None]:.1f} ({low[None]:.1f}) ms, "
            f"{made[None]} decisions; every job using them loosely {med['loose']:.1f} "
            f"({low['loose']:.1f}) ms, {made['loose']} decisions, "
            f"{med['loose'] / med[None]:.2f} x; binding {med['binding']:.1f} "
            f"({low['binding']:.1f}) ms, {made['binding']} decisions"
        )


def trace_scenario(n_jobs: int, seed: int = 2) -> dict[str, Any]:
    rng = random.Random(seed)
    shares = make_shares(rng, 40)
    capacity = {t: sum(s.limits.get(t, 0) for s in shares) * 3 // 4 + 5 for t in TYPES}
    mean_work = (sum(COUNTS) / len(COUNTS)) * (30 + 3000) / 2
    mean_gap = mean_work / sum(capacity.values())  # offered load = capacity
    jobs = []
    t = 0.0
    for i in range(n_jobs):
        t += rng.expovariate(1 / mean_gap)
        share = rng.choice(shares)
        prefs = make_prefs(rng, share)
        jobs.append(
            {
                "id": f"j{i}",
                "share": share.name,
                "submit_at": int(t),
                "priority": rng.randint(0, 100),
                "preferences": [
                    {"instance_type": p.instance_type, "count": p.count} for p in prefs
                ],
                "duration": rng.randint(30, 3000),
                "checkpoint_interval": rng.choice([None, 60, 300]),
                "restart_overhead": rng.choice([0, 10]),
                "max_pending": rng.choice([None, None, 3600]),
            }
        )
    return {
        "instance_types": [{"name": n, "capacity": c} for n, c in capacity.items()],
        "shares": [
            {
                "name": s.name,
                "policy": s.policy.value,
                "borrow_limit": s.borrow_limit,
                "limits": s.limits,
                "in_share_preemption": s.in_share_preemption,
                "preemption_retries": s.preemption_retries,
            }
            for s in shares
        ],
        "jobs": jobs,
    }


# ---------------------------------------------------------------------------- oversubscribed

DAY = 86_400
OVERSUB_SPAN = 30 * DAY
"""The 100,000-job oversubscribed trace spans 30 days; smaller ones keep its arrival rate
and capacity and span proportionally less (so their backlog is proportionally shallower)."""
OVERSUB_JOBS = 100_000
OVERSUB_COUNTS = [1, 1, 1, 1, 2, 2, 2, 3, 4, 4, 6, 8]
OVERSUB_MEAN_HOURS = 2.0
OVERSUB_TYPE_WEIGHTS = {
    "ml.g5.xlarge": 0.35,
    "ml.g5.12xlarge": 0.25,
    "ml.p4d.24xlarge": 0.15,
    "ml.p5.48xlarge": 0.10,
    "ml.trn1.32xlarge": 0.15,
}
PRIORITY_BANDS = [10, 100, 100, 100, 500, 500, 1000, 5000]


def oversubscribed_scenario(
    n_jobs: int,
    load: float,
    seed: int = 3,
    scale: float = 1.0,
    mean_hours: float = OVERSUB_MEAN_HOURS,
    max_prefs: int = 3,
) -> dict[str, Any]:
    """A realistic, oversubscribed GPU queue (see ``OVERSUB_*``): 20 shares over 5 types
    whose limits add up to more than the capacity, jobs arriving as a Poisson stream
    whose offered work is ``load`` x capacity (100,000 jobs in 30 days), lognormal
    durations with a mean of two hours, counts 1 to 8 (often one count for every
    preference), 1 to 3 preferences, priorities in bands, a tenth with a max pending
    time, checkpoints, and a daily capacity dip on one type for a few hours (capacity
    lost, then back). Seeded: the same arguments give the same scenario. ``scale`` shrinks
    capacity and arrival rate together (same load, backlog as deep relative to capacity):
    small traces that still queue deeply, for tests that also run the full re-examination.
    ``mean_hours`` and ``max_prefs``: the deep, varied trace (:func:`deep_scenario`)."""
    rng = random.Random(seed)
    mean_count = sum(OVERSUB_COUNTS) / len(OVERSUB_COUNTS)
    mean_gap = OVERSUB_SPAN / OVERSUB_JOBS / scale
    total_capacity = mean_count * mean_hours * 3600 / mean_gap / load
    capacity = {t: max(8, round(total_capacity * w)) for t, w in OVERSUB_TYPE_WEIGHTS.items()}
    shares = []
    weights = []
    for i in range(20):
        chosen = rng.sample(TYPES, rng.randint(1, 5))
        weight = rng.choice([1, 1, 2, 3, 5])
        weights.append(weight)
        shares.append((f"team{i:02d}", chosen, weight))
    total_weight = sum(weights)
    share_rows = []
    for name, chosen, weight in shares:
        share_rows.append(
            {
                "name": name,
                # a tenth of the limits are 0 (borrow-only types); together they add up
                # to about the capacity (more on some types), and each fits most counts
                "limits": {
                    t: 0
                    if rng.random() < 0.1
                    else max(
                        min(8, max(1, capacity[t] // 3)),
                        round(capacity[t] * 2 * weight / total_weight * rng.uniform(0.5, 1.5)),
                    )
                    for t in chosen
                },
                "policy": rng.choice(POLICIES).value,
                "borrow_limit": rng.choice([-1, -1, 0, 50, 100, 200]),
                "in_share_preemption": rng.random() < 0.5,
                "preemption_retries": rng.choice([None, None, 3, 10]),
            }
        )
    sigma = 1.0
    mu = math.log(mean_hours * 3600) - sigma * sigma / 2
    jobs = []
    t = 0.0
    for i in range(n_jobs):
        t += rng.expovariate(1 / mean_gap)
        row = rng.choices(share_rows, weights=weights)[0]
        own_types = list(row["limits"])
        options = own_types + ([rng.choice(TYPES)] if rng.random() < 0.2 else [])
        if max_prefs > 3:
            options += rng.sample(TYPES, 2)  # the deep trace: longer, more varied lists
        picked = rng.sample(sorted(set(options)), rng.randint(1, min(max_prefs, len(set(options)))))
        count = rng.choice(OVERSUB_COUNTS)
        if rng.random() < 0.7:
            prefs = [{"instance_type": p, "count": count} for p in picked]
        else:
            prefs = [{"instance_type": p, "count": rng.choice(OVERSUB_COUNTS)} for p in picked]
        duration = min(3 * DAY, max(60, int(rng.lognormvariate(mu, sigma))))
        jobs.append(
            {
                "id": f"j{i}",
                "share": row["name"],
                "submit_at": int(t),
                "priority": rng.choice(PRIORITY_BANDS) + rng.randint(0, 9),
                "preferences": prefs,
                "duration": duration,
                "checkpoint_interval": rng.choice([None, 600, 1800]),
                "restart_overhead": rng.choice([0, 0, 60]),
                "max_pending": rng.choice([3600, 4 * 3600, DAY]) if rng.random() < 0.1 else None,
            }
        )
    actions = []
    for day in range(int(t) // DAY + 1):
        name = rng.choice(TYPES)
        start = day * DAY + rng.randint(0, DAY - 4 * 3600)
        dip = max(0, capacity[name] - rng.randint(1, max(1, capacity[name] // 4)))
        actions.append(
            {"at": start, "type": "set_capacity", "instance_type": name, "capacity": dip}
        )
        actions.append(
            {
                "at": start + rng.randint(1, 4) * 3600,
                "type": "set_capacity",
                "instance_type": name,
                "capacity": capacity[name],
            }
        )
    return {
        "instance_types": [
            {"name": n, "capacity": c, "speed": 2 if n.startswith("ml.p5") else 1}
            for n, c in capacity.items()
        ],
        "shares": share_rows,
        "jobs": jobs,
        "actions": actions,
    }


DEEP_JOBS = 100_000
DEEP_QUICK_JOBS = 20_000
DEEP_LOADS = [1.3, 2.0, 3.0]
DEEP_TARGET = 12_000
"""Events per second the deep, varied trace should reach (a third of it at first)."""


def deep_scenario(n_jobs: int, load: float, seed: int = 4) -> dict[str, Any]:
    """The deep, varied trace: the oversubscribed generator with hour-long lognormal
    durations (mean one hour, so more events per job) and preference lists of up to five
    types (their share's types plus two random ones), over 20 shares of mixed policies and
    borrow limits; 100,000 jobs span 30 days, smaller ones proportionally less."""
    return oversubscribed_scenario(n_jobs, load, seed=seed, mean_hours=1.0, max_prefs=5)


def digest(result: dict[str, Any]) -> str:
    """A short hash of a run's whole result (events, jobs, reasons): a speed-up of the
    engine must leave it byte for byte as it was."""
    text = json.dumps(result, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _verdict(rate: float) -> str:
    return "ok" if rate >= DEEP_TARGET else "missed"


def bench_deep(n_jobs: int, load: float, profile: bool) -> float:
    """Run one deep, varied trace and print events, seconds and events/s."""
    data = deep_scenario(n_jobs, load)
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    cpu_start = time.process_time()
    result, elapsed, samples = run_observed(data)
    cpu = time.process_time() - cpu_start
    if profiler:
        profiler.disable()
    n_events = len(result["events"])
    deepest = max((depth for depth, _ in samples), default=0)
    rate = n_events / elapsed
    # the CPU time too: on a shared machine the wall clock also counts others' work
    per_cpu = n_events / cpu
    print(
        f"deep: load {load:.1f}, {n_jobs:>6} jobs, {n_events:>7} events in {elapsed:6.1f} s "
        f"= {rate:8,.0f} events/s (target {DEEP_TARGET:,}: {_verdict(rate)}); process CPU "
        f"{cpu:.1f} s = {per_cpu:,.0f} events per CPU second ({_verdict(per_cpu)}); "
        f"deepest backlog {deepest:>6} pending; result digest {digest(result)}"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return rate


class _Observed(Engine):
    """The engine, timing each ``schedule`` call with the backlog depth it started at."""

    samples: list[tuple[int, float]]

    def schedule(self, now: int) -> list[Decision]:
        depth = self.pending_count()
        start = time.perf_counter()
        out = super().schedule(now)
        self.samples.append((depth, time.perf_counter() - start))
        return out


def run_observed(data: dict[str, Any]) -> tuple[dict[str, Any], float, list[tuple[int, float]]]:
    """``simulate.run`` on the observed engine: (result, seconds, schedule samples)."""
    samples: list[tuple[int, float]] = []

    class Observed(_Observed):
        pass

    Observed.samples = samples
    original = simulate.Engine
    simulate.Engine = Observed  # type: ignore[misc]
    try:
        start = time.perf_counter()
        result = simulate.run(data)
        elapsed = time.perf_counter() - start
    finally:
        simulate.Engine = original  # type: ignore[misc]
    return result, elapsed, samples


def bench_oversubscribed(n_jobs: int, load: float) -> float:
    """Run one oversubscribed trace and print its figures; returns events/s."""
    data = oversubscribed_scenario(n_jobs, load)
    result, elapsed, samples = run_observed(data)
    n_events = len(result["events"])
    deepest = max((depth for depth, _ in samples), default=0)
    near = [secs for depth, secs in samples if depth >= deepest * 0.9]
    per_call = sum(near) / len(near) * 1000 if near else 0.0
    worst = max(near, default=0.0) * 1000
    rate = n_events / elapsed
    print(
        f"oversubscribed: load {load:.1f}, {n_jobs:>6} jobs, {n_events:>7} events in "
        f"{elapsed:6.1f} s = {rate:8,.0f} events/s; deepest backlog {deepest:>6} pending; "
        f"schedule() at >= 90% of that depth: {per_call:.2f} ms mean, {worst:.1f} ms max "
        f"over {len(near)} instants"
    )
    return rate


def bench_cycles(sizes: list[tuple[int, int]]) -> None:
    for pending, running in sizes:
        engine = cycle_state(pending, running)
        start = time.perf_counter()
        decisions = engine.schedule(1000)
        first = time.perf_counter() - start
        start = time.perf_counter()
        engine.submit(Job("extra", "team00", 50, 1001, (Preference(TYPES[0], 1),)))
        engine.schedule(1001)
        again = time.perf_counter() - start
        print(
            f"cycle: {pending:>6} pending + {running} running: {first * 1000:8.1f} ms "
            f"({len(decisions)} decisions); next instant with one new job: {again * 1000:.2f} ms"
        )


def bench_trace(n_jobs: int, profile: bool) -> None:
    data = trace_scenario(n_jobs)
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    cpu_start = time.process_time()
    if profiler:
        profiler.enable()
    result = simulate.run(data)
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    n_events = len(result["events"])
    print(
        f"trace: {n_jobs} jobs, {n_events} events in {elapsed:.1f} s "
        f"= {n_events / elapsed:,.0f} events/s (process CPU time {cpu:.1f} s)"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


CYCLE_SIZES = [(1_000, 5_000), (10_000, 5_000), (50_000, 5_000), (100_000, 10_000)]
PARTS = ("cycles", "constrained", "trace", "oversub", "deep")
CONSTRAINED_SIZES = [(10_000, 5_000), (50_000, 5_000)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace-jobs", type=int, default=100_000)
    parser.add_argument("--profile", action="store_true", help="cProfile the trace")
    parser.add_argument(
        "--only", choices=PARTS, action="append", help="run only these parts (repeatable)"
    )
    parser.add_argument(
        "--oversub-jobs",
        type=int,
        action="append",
        help="sizes of the oversubscribed traces (repeatable; default 10,000 and 100,000)",
    )
    parser.add_argument(
        "--load", type=float, action="append", help="offered loads (default 1.0, 1.3, 2.0)"
    )
    parser.add_argument(
        "--deep-jobs",
        type=int,
        action="append",
        help=f"sizes of the deep, varied traces (repeatable; default {DEEP_JOBS:,})",
    )
    parser.add_argument(
        "--deep-load",
        type=float,
        action="append",
        help=f"offered loads of the deep traces (default {', '.join(map(str, DEEP_LOADS))})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only the oversubscribed traces, 10,000 and 20,000 jobs at each load",
    )
    args = parser.parse_args()
    parts = set(args.only or PARTS)
    sizes = args.oversub_jobs or [10_000, OVERSUB_JOBS]
    if args.quick:
        parts = set(args.only or ("oversub",))
        sizes = args.oversub_jobs or [10_000, 20_000]
    if "cycles" in parts:
        bench_cycles(CYCLE_SIZES)
    if "constrained" in parts:
        bench_constrained(CONSTRAINED_SIZES)
    if "trace" in parts:
        bench_trace(args.trace_jobs, args.profile)
    if "deep" in parts:
        deep_sizes = args.deep_jobs or ([DEEP_QUICK_JOBS] if args.quick else [DEEP_JOBS])
        for load in args.deep_load or DEEP_LOADS:
            for n in deep_sizes:
                bench_deep(n, load, args.profile)
    if "oversub" in parts:
        for load in args.load or [1.0, 1.3, 2.0]:
            rates = [bench_oversubscribed(n, load) for n in sizes]
            if len(rates) > 1:
                print(
                    f"oversubscribed: load {load:.1f}: events/s at {sizes[0]:,} jobs / at "
                    f"{sizes[-1]:,} jobs = {rates[0] / rates[-1]:.2f}"
                )


if __name__ == "__main__":
    main()
