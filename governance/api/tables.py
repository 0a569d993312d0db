"""The one way the product writes a CSV file: every text cell that a spreadsheet would
read as a formula (one starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return) is written with a leading apostrophe, so opening an export never runs what a
user typed into a name, a reason or a job's label. Numbers are written as they are (a
negative figure is a number, not a formula).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
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


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows of figures as CSV text: the columns in the order they first appear, an empty
    cell for null, formula text neutralised."""
    out = io.StringIO()
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    writer = SafeWriter(out)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(row.get(column) for column in columns)
    return out.getvalue()
