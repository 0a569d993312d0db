"""Promises of allocation agreements (docs/agreements.md): a numeric signal, by its dotted
path in the signals answer (``wait_to_start.entitled.p90``, ``goodput``), compared with
a threshold.

Plain Python, no Django. The figures a promise may name are not listed here: they are
read off the answer ``scheduler.signals.compute`` gives for an empty recording, so a
figure the signals gain (``deadlines.rate``) becomes promisable without a change here.
Figures keyed by instance type, plan or preference index are left out: their keys depend
on the queue.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from scheduler import signals

COMPARISONS = ("<=", ">=")
KEPT, BROKEN, NO_DATA = "kept", "broken", "no_data"
# Figures that are fractions: a threshold outside [0, 1] could never be met or missed.
FRACTIONS = ("goodput",)


@functools.cache
def figure_paths() -> tuple[str, ...]:
    """Every numeric figure of a group, by its dotted path, in the answer's order."""
    empty = signals.Recording(
        scenario={"instance_types": [], "shares": [], "jobs": [], "until": 0},
        events=[],
        teams={},
        audit=[],
    )
    answer = signals.compute(empty, 0, 1)
    paths: list[str] = []
    _numeric_paths("", answer["queue"], paths)
    return tuple(paths)


def _numeric_paths(prefix: str, value: Any, out: list[str]) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _numeric_paths(f"{prefix}.{key}" if prefix else str(key), inner, out)
    elif value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        out.append(prefix)


def is_fraction(path: str) -> bool:
    """A figure that lies in [0, 1] (a rate, goodput, a utilization)."""
    return path in FRACTIONS or path.endswith("rate") or path.startswith("utilization.")


SECONDS, FRACTION, COUNT, RATIO, MONEY = "seconds", "fraction", "count", "ratio", "money"
"""What a figure counts (:func:`unit`): the pages write each its own way."""
DURATIONS = ("wait_to_start", "turnaround", "time_to_restart", "lost_work")


def unit(path: str) -> str:
    """What the figure at ``path`` counts: ``seconds`` (waits, turnarounds, restarts, the
    time to decide, and lost work in work-seconds), ``fraction`` (a rate, goodput, a
    utilization), ``money`` (cost), ``ratio`` (preemptions per finished job) or
    ``count`` (jobs, preemptions, decisions, policy changes)."""
    if is_fraction(path):
        return FRACTION
    if path.startswith("cost."):
        return MONEY
    if path.split(".")[0] in DURATIONS or "time_to_decide" in path or "wait_to_start" in path:
        return SECONDS
    if path == "preemptions_per_finished_job":
        return RATIO
    return COUNT


def pick(figures: Mapping[str, Any], path: str) -> float | None:
    """The value at ``path`` in one group's figures; None when it is null or absent."""
    value: Any = figures
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def judge(value: float | None, comparison: str, threshold: float) -> str:
    """``kept`` when the value meets the comparison, ``broken`` when not, ``no_data``
    when the figure is null (nothing to judge in the window)."""
    if value is None:
        return NO_DATA
    met = value <= threshold if comparison == "<=" else value >= threshold
    return KEPT if met else BROKEN


def group_figures(answer: Mapping[str, Any], group_by: str, name: str) -> Mapping[str, Any] | None:
    """One group's figures in a signals answer (None when the group is not in it)."""
    for group in answer.get("groups") or []:
        if group.get(group_by) == name:
            return group
    return None


def evaluate(
    answer: Mapping[str, Any],
    *,
    group_by: str,
    name: str,
    figure: str,
    comparison: str,
    threshold: float,
) -> tuple[float | None, str]:
    """(value, state) of one promise on a signals answer grouped by ``group_by``."""
    figures = group_figures(answer, group_by, name)
    value = pick(figures, figure) if figures is not None else None
    return value, judge(value, comparison, threshold)
