"""Every shared conformance scenario passes, read in place from ../shared/scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.simulate import check, run
from tests.engine.helpers import SCENARIOS

FILES = sorted(SCENARIOS.glob("*.json"))


def test_shared_scenarios_exist() -> None:
    assert FILES, f"no scenarios found in {SCENARIOS}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_shared_scenario(path: Path) -> None:
    data = json.loads(path.read_text())
    result = run(data, explain=True)
    assert check(data, result) == []
    assert run(data, explain=True, incremental=False) == result
