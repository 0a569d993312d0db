"""The engine's outputs are the ones recorded before its rewrite (``golden.json``).

The small cases run here; ``python -m tests.engine.golden verify [--big]`` runs the rest
(the bench's 5,000- to 100,000-job traces and its big cycles), which take minutes.
"""

from __future__ import annotations

import pytest

from tests.engine.golden import cases, digest, recorded

IN_SUITE = ("scenario/", "busy/", "oversub-small/", "trace/2000")
SELECTED = sorted(
    name for name, (big, _) in cases().items() if not big and name.startswith(IN_SUITE)
)


def test_every_selected_case_is_recorded() -> None:
    assert SELECTED and set(SELECTED) <= set(recorded())


@pytest.mark.parametrize("name", SELECTED)
def test_output_is_the_recorded_one(name: str) -> None:
    _, make = cases()[name]
    assert digest(make()) == recorded()[name]
