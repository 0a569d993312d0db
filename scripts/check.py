"""Every check of the project, as CI runs it: ``./scripts/test [pytest args]``.

Runs ruff (lint and format), mypy and pytest, each even when an earlier one failed, prints
a summary and exits non-zero when any failed. Set ``LINT=0`` to run pytest alone.
"""

from __future__ import annotations

import os
import subprocess
import sys

from scripts.common import ROOT, data_dir, say, services

LINT_STEPS: list[tuple[str, list[str]]] = [
    ("ruff check", ["ruff", "check", "."]),
    ("ruff format", ["ruff", "format", "--check", "."]),
    ("mypy", ["mypy", "governance", "scheduler", "scripts"]),
]


def main(pytest_args: list[str]) -> int:
    steps = list(LINT_STEPS) if os.environ.get("LINT", "1") != "0" else []
    steps.append(("pytest", ["pytest", *pytest_args]))

    results: list[tuple[str, int]] = []
    # Tests get embedded servers of their own (under DATA_DIR/test), apart from the ones
    # `./scripts/run` uses, so a running demo and a test run do not share a broker.
    with services(os.environ, data_dir() / "test"):
        for name, command in steps:
            say(f"{name}: {' '.join(command)}")
            results.append((name, subprocess.call(command, cwd=ROOT)))

    failed = [name for name, code in results if code != 0]
    summary = ", ".join(
        f"{name} {'ok' if code == 0 else f'FAILED ({code})'}" for name, code in results
    )
    say(summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
