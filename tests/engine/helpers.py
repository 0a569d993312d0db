"""Small builders so each engine test states one rule as a tiny scenario dict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.simulate import run

# The shared conformance files live beside the repository, not in it: tests that read them
# skip when the folder is absent. The product's own examples ship in ``examples/``.
SCENARIOS = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"

G = "ml.g5.xlarge"
P = "ml.p4d.24xlarge"
C = "ml.c5.xlarge"


def itype(name: str = G, capacity: int = 4, **extra: Any) -> dict[str, Any]:
    return {"name": name, "capacity": capacity, **extra}


def share(
    name: str, limits: dict[str, int], policy: str = "RESERVE", **extra: Any
) -> dict[str, Any]:
    return {"name": name, "policy": policy, "limits": limits, **extra}


def job(
    job_id: str,
    share_name: str,
    prefs: list[tuple[str, int]] | None = None,
    *,
    at: int = 0,
    prio: int = 1,
    duration: int = 1000,
    **extra: Any,
) -> dict[str, Any]:
    preferences = [{"instance_type": t, "count": n} for t, n in (prefs or [(G, 1)])]
    return {
        "id": job_id,
        "share": share_name,
        "submit_at": at,
        "priority": prio,
        "preferences": preferences,
        "duration": duration,
        **extra,
    }


def scenario(
    types: list[dict[str, Any]],
    shares: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    actions: list[dict[str, Any]] | None = None,
    until: int | None = 500,
) -> dict[str, Any]:
    """A scenario; ``until`` defaults to 500 (jobs last 1000 by default), pass None for
    "until nothing is left to happen"."""
    data: dict[str, Any] = {"instance_types": types, "shares": shares, "jobs": jobs}
    if actions:
        data["actions"] = actions
    if until is not None:
        data["until"] = until
    return data


def simulate(data: dict[str, Any], explain: bool = False) -> dict[str, Any]:
    """Run through the public runner, both incrementally and with full scans, and insist
    that the two agree (the incremental engine must be exact)."""
    result = run(data, explain=explain)
    assert run(data, explain=explain, incremental=False) == result
    return result


def events(result: dict[str, Any], kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in result["events"] if kind is None or e["type"] == kind]


def admitted(result: dict[str, Any]) -> list[tuple[int, str, str, int]]:
    """(at, job, instance type, borrowed) of each admission."""
    return [
        (e["at"], e["job"], e["instance_type"], e["borrowed"]) for e in events(result, "admitted")
    ]


def preempted(result: dict[str, Any]) -> list[tuple[int, str, str, str | None]]:
    """(at, job, reason, by) of each preemption."""
    return [(e["at"], e["job"], e["reason"], e["by"]) for e in events(result, "preempted")]


def trace(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Compact (at, type, job) list of all events."""
    return [(e["at"], e["type"], e["job"]) for e in result["events"]]


def reasons(result: dict[str, Any]) -> dict[str, list[str]]:
    return {
        k: [r["reason"] if isinstance(r, dict) else r for r in v]
        for k, v in result["pending"].items()
    }
