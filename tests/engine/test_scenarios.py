"""Scenario files pass their own expectations: the product's examples in
``examples/scenarios/`` always, the shared conformance files of ``../shared/scenarios``
only where that folder is mounted (a clone of the repository does not have it).

Each file runs as ``python -m scheduler.simulate FILE --check`` would judge it, and again
with full re-examination (``incremental=False``), which must give the same result.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.simulate import check, run
from tests.engine.helpers import EXAMPLES, SCENARIOS

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.json"))
SHARED_ABSENT = f"{SCENARIOS} is absent: the shared conformance files are not in the repository"


def _shared_files() -> list[Any]:
    if not SCENARIOS.is_dir():
        return [pytest.param(None, id="absent", marks=pytest.mark.skip(reason=SHARED_ABSENT))]
    return [pytest.param(path, id=path.stem) for path in sorted(SCENARIOS.rglob("*.json"))]


def _assert_passes(path: Path) -> None:
    data = json.loads(path.read_text())
    result = run(data, explain=True)
    assert check(data, result) == []
    assert run(data, explain=True, incremental=False) == result


def test_the_product_ships_example_scenarios() -> None:
    assert len(EXAMPLE_FILES) >= 8, f"expected example scenarios in {EXAMPLES}"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_scenario(path: Path) -> None:
    _assert_passes(path)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_scenario_says_what_it_shows_and_what_to_expect(path: Path) -> None:
    """An example is documentation: it tells its story and checks the outcome."""
    data = json.loads(path.read_text())
    assert isinstance(data.get("description"), str) and len(data["description"]) > 80
    assert data.get("expect"), "an example lists the events it expects"
    assert "expect_jobs" in data and "expect_pending" in data


def test_shared_scenarios_exist_where_mounted() -> None:
    if not SCENARIOS.is_dir():
        pytest.skip(SHARED_ABSENT)
    assert sorted(SCENARIOS.rglob("*.json")), f"no scenarios found in {SCENARIOS}"


@pytest.mark.parametrize("path", _shared_files())
def test_shared_scenario(path: Path) -> None:
    _assert_passes(path)


# Waiting reasons in the middle of a story, which the files' own expectations (at the end)
# cannot state; the descriptions and docs/scheduling.md tell them.
MIDPOINTS = [
    # At 0 baseline is past research's borrow limit although product's instances are idle.
    ("worked_example", 0, {"baseline": ["borrow_limit_reached"]}),
    # After the reclaim at 60 nothing is free to borrow any more.
    (
        "worked_example",
        60,
        {
            "sweep-a": ["no_lendable_capacity"],
            "sweep-b": ["no_lendable_capacity"],
            "baseline": ["no_lendable_capacity"],
        },
    ),
    ("borrow_and_reclaim", 200, {"i-3": ["no_lendable_capacity"]}),
    ("borrow_limit", 0, {"n-4": ["borrow_limit_reached"], "s-3": ["own_quota_full"]}),
    (
        "capacity_drop",
        250,
        {
            "label-a": ["no_preemptible_victims"],
            "label-b": ["no_preemptible_victims"],
            "label-c": ["no_preemptible_victims"],
        },
    ),
]


@pytest.mark.parametrize(
    ("name", "until", "pending"), [pytest.param(*m, id=f"{m[0]}@{m[1]}") for m in MIDPOINTS]
)
def test_example_midpoint(name: str, until: int, pending: dict[str, list[str]]) -> None:
    data: dict[str, Any] = copy.deepcopy(json.loads((EXAMPLES / f"{name}.json").read_text()))
    data["until"] = until
    result = run(data)
    assert result["pending"] == pending
    assert run(data, incremental=False) == result
