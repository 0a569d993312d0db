"""The fault suite prints its figures at the end of the run, whatever the capture mode."""

from __future__ import annotations

from typing import Any

# Lines added by tests/faults/test_faults.py; printed in the terminal summary.
REPORT: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if REPORT:
        terminalreporter.section("fault report")
        for line in REPORT:
            terminalreporter.write_line(line)
