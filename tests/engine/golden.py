"""Fingerprints of the engine's outputs, recorded once and checked after every change.

``python -m tests.engine.golden verify [--big]`` recomputes each case and compares its
SHA-256 with ``golden.json``; ``record`` rewrites the file (only ever from a commit whose
outputs are known to be right). A case is the simulator's ``--explain`` output for a
shared scenario, a seeded trace (the bench's and the tests'), or the decisions of one big
``schedule`` call of the bench; ``--big`` adds the long ones (the 100,000-job traces),
which take minutes. ``tests/engine/test_golden.py`` checks the small cases in the suite.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.engine import cycle_state, oversubscribed_scenario, trace_scenario
from scheduler.simulate import main as simulate_main
from scheduler.simulate import run
from tests.engine.helpers import SCENARIOS
from tests.engine.test_incremental_exact import busy_trace

GOLDEN = Path(__file__).with_name("golden.json")
LOADS = (1.0, 1.3, 2.0)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _result_text(data: dict[str, Any]) -> str:
    return json.dumps(run(data, explain=True), indent=1)


def _cli_text(path: Path) -> str:
    """What ``python -m scheduler.simulate FILE --explain`` prints, byte for byte."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = simulate_main([str(path), "--explain"])
    return f"{status}\n{out.getvalue()}"


def _cycle_text(pending: int, running: int) -> str:
    engine = cycle_state(pending, running)
    decisions = [d.to_event() for d in engine.schedule(1000)]
    reasons = {
        job.id: [r.to_json() for r in engine.explain(job.id)] for job in engine.pending_jobs()
    }
    return json.dumps({"decisions": decisions, "reasons": reasons})


def cases() -> dict[str, tuple[bool, Callable[[], str]]]:
    """name -> (big, output text)."""
    found: dict[str, tuple[bool, Callable[[], str]]] = {}
    for path in sorted(SCENARIOS.glob("*.json")):
        found[f"scenario/{path.stem}"] = (False, lambda p=path: _cli_text(p))
    for seed in range(12):
        found[f"busy/{seed}"] = (False, lambda s=seed: _result_text(busy_trace(s)))
    for n in (2_000, 20_000):
        found[f"trace/{n}"] = (n > 2_000, lambda n=n: _result_text(trace_scenario(n)))
    found["trace/100000"] = (True, lambda: _result_text(trace_scenario(100_000)))
    for load in LOADS:
        found[f"oversub-small/{load}"] = (
            False,
            lambda x=load: _result_text(oversubscribed_scenario(600, x, seed=5, scale=0.05)),
        )
        for n in (5_000, 20_000):
            found[f"oversub/{load}/{n}"] = (
                n > 5_000,
                lambda x=load, n=n: _result_text(oversubscribed_scenario(n, x)),
            )
    for load in (1.3, 2.0):
        found[f"oversub/{load}/100000"] = (
            True,
            lambda x=load: _result_text(oversubscribed_scenario(100_000, x)),
        )
    for pending, running in ((1_000, 5_000), (10_000, 5_000)):
        found[f"cycle/{pending}+{running}"] = (
            False,
            lambda p=pending, r=running: _cycle_text(p, r),
        )
    found["cycle/100000+10000"] = (True, lambda: _cycle_text(100_000, 10_000))
    return found


def recorded() -> dict[str, str]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.engine.golden")
    parser.add_argument("action", choices=["record", "verify"])
    parser.add_argument("--big", action="store_true", help="include the long cases")
    parser.add_argument("--only", help="only cases whose name starts with this")
    args = parser.parse_args(argv)
    known = recorded()
    bad = 0
    for name, (big, make) in cases().items():
        if (big and not args.big) or (args.only and not name.startswith(args.only)):
            continue
        start = time.perf_counter()
        got = digest(make())
        took = time.perf_counter() - start
        if args.action == "record":
            known[name] = got
            print(f"recorded {name} ({took:.1f} s)", flush=True)
        elif known.get(name) == got:
            print(f"same     {name} ({took:.1f} s)", flush=True)
        else:
            bad += 1
            print(f"DIFFERS  {name} ({took:.1f} s)", flush=True)
    if args.action == "record":
        GOLDEN.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
