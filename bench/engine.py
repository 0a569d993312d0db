"""Engine benchmark: ``python bench/engine.py [--trace-jobs N] [--profile]``.

Prints one cycle's time for 1,000 / 10,000 / 50,000 pending jobs with 5,000 running,
and a whole simulation's throughput (events per second) for a 100,000-job trace.
Seeded, so figures are comparable run to run.

Workload (both parts): 20 shares with 1 to 5 limits over 5 instance types, random
policies (RESERVE / LEND / LEND_AND_BORROW), borrow limits (-1, 0, 50, 100, 200 %),
in-share preemption on for about half, retries None/3/10; jobs with preference lists of
1 to 5 types (their share's types plus two random ones, so some preferences have no
limit), counts 1/1/1/2/2/4/8, priorities 0 to 100.

Cycle state: a busy queue reached *by the rules*. Capacity per type is the sum of the
shares' limits on it; 8,000 candidate jobs (one preference each, on a type of their
share, count 1 or 2) are submitted to an engine and admitted by ``schedule``; the first
5,000 admitted are restored as RUNNING (random priorities, start times, checkpoint
intervals) in a fresh engine whose capacity per type is what they hold plus 2%. So
every share is within its limit or borrow cap and capacity is respected, as in a real
cluster; the measured cycle then admits into the remaining slack and carries out the
reclaims and in-share preemptions the rules call for (it is not a no-op). Then the
pending jobs are submitted and one ``schedule`` call (all its cycles) is timed, and then
one more instant with a single new job.

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
import pstats
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.engine import (
    Engine,
    InstanceType,
    Job,
    JobState,
    Policy,
    Preference,
    ShareConfig,
)
from scheduler.simulate import run

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
    admitted = [d.job for d in filler.schedule(0) if d.kind == "admitted"][:running]
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


def cycle_state(pending: int, running: int = 5000, seed: int = 1) -> Engine:
    """A busy queue reached by the rules (see the module docstring)."""
    rng = random.Random(seed)
    shares = make_shares(rng, 400)
    jobs, held = _running_by_rules(rng, shares, running)
    engine = Engine([InstanceType(t, held[t] + held[t] // 50) for t in TYPES], shares)
    engine.restore(jobs)
    for i in range(pending):
        share = rng.choice(shares)
        engine.submit(
            Job(
                f"p{i}",
                share.name,
                rng.randint(0, 100),
                rng.randint(0, 900),
                make_prefs(rng, share),
            )
        )
    return engine


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace-jobs", type=int, default=100_000)
    parser.add_argument("--profile", action="store_true", help="cProfile the trace")
    args = parser.parse_args()
    for pending in (1_000, 10_000, 50_000):
        engine = cycle_state(pending)
        start = time.perf_counter()
        decisions = engine.schedule(1000)
        first = time.perf_counter() - start
        start = time.perf_counter()
        engine.submit(Job("extra", "team00", 50, 1001, (Preference(TYPES[0], 1),)))
        engine.schedule(1001)
        again = time.perf_counter() - start
        print(
            f"cycle: {pending:>6} pending + 5000 running: {first * 1000:8.1f} ms "
            f"({len(decisions)} decisions); next instant with one new job: {again * 1000:.2f} ms"
        )
    data = trace_scenario(args.trace_jobs)
    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    cpu_start = time.process_time()
    if profiler:
        profiler.enable()
    result = run(data)
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    n_events = len(result["events"])
    print(
        f"trace: {args.trace_jobs} jobs, {n_events} events in {elapsed:.1f} s "
        f"= {n_events / elapsed:,.0f} events/s (process CPU time {cpu:.1f} s)"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
