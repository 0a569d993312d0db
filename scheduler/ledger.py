"""The lending ledger of a recorded history (docs/ledger.md): over a window, whose idle
entitlement each borrower held (instance-time per lender, borrower and type). No Django.

The recording is what ``scheduler.history.export`` gives (and what signals read): the
scenario (types with their capacity, shares as they were at the window's start, later
``set_capacity`` and ``set_share`` actions, the jobs) and the recorded events, times in
the scenario's unit. The counting rules are the signals' (docs/signals.md): a run lasts
from its ``admitted`` event to the job's next ``preempted``, ``completed``, ``failed`` or
``cancelled`` event (or the end of the recording), a run going at the window's start is
counted from the start, and each interval takes the state at the end of its first
instant. At every instant borrowed instances are attributed to their sources by
``scheduler.engine.accounting.lending`` with the shares in name order, the order the
pages attribute ``lent`` in; integrals are exact (instance-time in the scenario's unit).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from scheduler.engine import accounting

RUN_ENDS = frozenset({"preempted", "completed", "failed", "cancelled"})
Key = tuple[str, str | None, str, str]  # (borrower, lender or None, source, type)


@dataclass
class Ledger:
    """Integrals in instance-time units of the scenario (ms for an export): ``held``
    maps (borrower, lender or None, source, type) to instance-time."""

    unit: int
    held: dict[Key, int] = field(default_factory=lambda: defaultdict(int))

    def seconds(self, key: Key) -> Fraction:
        return Fraction(self.held[key], self.unit)


def _unit(scenario: Mapping[str, Any]) -> int:
    return 1000 if scenario.get("time_unit") == "ms" else 1


def compute(
    scenario: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    start: int,
    stop: int,
    end: int,
) -> Ledger:
    """The ledger of ``[start, min(stop, end))``; ``end`` is the end of the recording."""
    hi = min(stop, end)
    ledger = Ledger(unit=_unit(scenario))
    capacity = {t["name"]: int(t["capacity"]) for t in scenario["instance_types"]}
    limits: dict[str, dict[str, int]] = {s["name"]: dict(s["limits"]) for s in scenario["shares"]}
    policy = {s["name"]: str(s.get("policy", "RESERVE")) for s in scenario["shares"]}
    owner = {str(j["id"]): str(j["share"]) for j in scenario.get("jobs") or []}
    for name in set(owner.values()) - set(limits):  # a share the scenario no longer lists
        limits[name], policy[name] = {}, "RESERVE"
    names = sorted(limits)
    usage: dict[tuple[str, str], int] = defaultdict(int)
    runs: dict[str, tuple[str, str, int]] = {}  # job -> (share, type, count) on demand

    timeline: list[tuple[int, int, int, Mapping[str, Any]]] = [
        (int(a["at"]), 0, i, a)
        for i, a in enumerate(scenario.get("actions") or [])
        if a["type"] in ("set_capacity", "set_share")
    ]
    timeline += [(int(e["at"]), 1, i, e) for i, e in enumerate(events)]
    timeline.sort(key=lambda item: item[:3])

    def apply(kind: int, item: Mapping[str, Any]) -> None:
        if kind == 0:
            if item["type"] == "set_capacity":
                capacity[item["instance_type"]] = int(item["capacity"])
            else:
                if "limits" in item:
                    limits[item["share"]] = dict(item["limits"])
                if "policy" in item:
                    policy[item["share"]] = str(item["policy"])
            return
        job = str(item["job"])
        etype = item["type"]
        if etype in RUN_ENDS and job in runs:
            share, type_name, count = runs.pop(job)
            usage[(share, type_name)] -= count
        if etype == "admitted" and not item.get("plan"):
            share = owner.get(job, "")
            type_name, count = str(item["instance_type"]), int(item["count"])
            runs[job] = (share, type_name, count)
            usage[(share, type_name)] += count

    def integrate(since: int, until: int) -> None:
        dt = min(until, hi) - max(since, start)
        if dt <= 0:
            return
        for type_name, cap in capacity.items():
            shares = [
                accounting.ShareOnType(
                    key=name,
                    policy=policy[name],
                    limit=limits[name].get(type_name),
                    usage=usage.get((name, type_name), 0),
                )
                for name in names
            ]
            if not any(accounting.borrowed(s.limit or 0, s.usage) for s in shares):
                continue
            for row in accounting.lending(cap, shares):
                ledger.held[(row.borrower, row.lender, row.source, type_name)] += row.count * dt

    current: int | None = None
    for at, kind, _, item in timeline:
        if at != current:
            if current is not None:
                integrate(current, at)
            current = at
        apply(kind, item)
    if current is not None:
        integrate(current, hi)
    return ledger
