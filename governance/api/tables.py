"""The one way the product writes a CSV file: every text cell that a spreadsheet would
read as a formula (one starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return) is written with a leading apostrophe, so opening an export never runs what a
user typed into a name, a reason or a job's label. Numbers are written as they are (a
negative figure is a number, not a formula).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any, Protocol

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Writable(Protocol):
    def write(self, value: str, /) -> Any: ...


def safe_cell(value: Any) -> Any:
    """``value`` as it may go into a CSV cell: ``None`` empty, formula text neutralised."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


class SafeWriter:
    """``csv.writer`` whose rows pass through :func:`safe_cell`; ``writerow`` returns
    what the file's ``write`` returned (the line, for streaming)."""

    def __init__(self, out: _Writable) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([safe_cell(value) for value in row])
