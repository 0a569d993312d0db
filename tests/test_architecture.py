"""The shape of the code base, held by a test: no import cycle between files, the engine
stands alone, governance reaches the scheduler through one door, executors see the cycle
only through its public types, selectors only read, page presenters live under the web,
not among the selectors, and the demo is a package of its own (docs/architecture.md).

Every import counts, at module level or inside a function (a deferred import is still a
dependency; it only hides a cycle). Reading the source with ``ast`` needs no database.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("governance", "scheduler")
DOOR = "governance.selectors.scheduling"
"""The one governance module that may import the scheduler (beyond its pure engine)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found[_module_name(path)] = path
    return found


MODULES = _modules()


def _imported(name: str, path: Path) -> Iterator[str]:
    """Project modules that the module ``name`` imports (each resolved to a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the submodule when there is one.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


GRAPH = {name: set(_imported(name, path)) for name, path in MODULES.items()}


def _names_from(name: str, target: str) -> set[str]:
    """What the module ``name`` imports of ``target``: the names of ``from target import
    ...``, and ``*module*`` when it imports the module itself (``import target``, ``from
    package import module``)."""
    tree = ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {"*module*" for alias in node.names if alias.name == target}
        elif isinstance(node, ast.ImportFrom) and node.module == target:
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {"*module*" for a in node.names if f"{node.module}.{a.name}" == target}
    return names


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(GRAPH[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read() -> None:
    assert "scheduler.cycle.run" in GRAPH["scheduler.tasks"]
    assert "governance.services.hooks" in GRAPH["governance.services.runs"]


def test_no_import_cycle_between_files() -> None:
    assert _cycles() == []


def test_the_engine_imports_only_itself() -> None:
    for name, targets in GRAPH.items():
        if name.startswith("scheduler.engine"):
            outside = {t for t in targets if not t.startswith("scheduler.engine")}
            assert not outside, f"{name} imports {sorted(outside)}"
            source = MODULES[name].read_text()
            assert "import django" not in source and "from django" not in source, name


def test_governance_reaches_the_scheduler_through_one_door() -> None:
    """Governance may use the engine's pure arithmetic (accounting, work) anywhere; the
    scheduler proper (cycle, readings, tasks, executors) only through ``DOOR``."""
    for name, targets in GRAPH.items():
        if not name.startswith("governance") or name == DOOR:
            continue
        reached = {
            t for t in targets if t.startswith("scheduler") and not t.startswith("scheduler.engine")
        }
        assert not reached, f"{name} imports {sorted(reached)}"


CYCLE_TYPES = {"scheduler.cycle", "scheduler.cycle.snapshot", "scheduler.cycle.result"}
"""What an executor may import of the cycle: the types its hooks are handed."""


def test_executors_see_the_cycle_only_through_its_public_types() -> None:
    """The cycle calls the executor (``scheduler/executors/base.py``), never the other way
    round: an executor imports the types its hooks are handed (``QueueSnapshot``,
    ``CycleResult``), never a phase (read, decide, apply, usage) nor the entry point
    (``scheduler.cycle.run``). A driver that starts a cycle with its own executor (the
    Slurm pass) is handed ``run_cycle`` by whoever starts it (beat's task, the completion
    hook's receiver), typed as ``executors.base.RunCycle``."""
    assert "scheduler.cycle.run" in GRAPH["scheduler.tasks"]  # the one who hands it in
    assert "scheduler.cycle.run" in GRAPH["scheduler.apps"]
    assert "scheduler.cycle.snapshot" in GRAPH["scheduler.executors.base"]  # the rule bites
    for name, targets in GRAPH.items():
        if not name.startswith("scheduler.executors"):
            continue
        cycle = {t for t in targets if t.startswith("scheduler.cycle")}
        assert cycle <= CYCLE_TYPES, f"{name} imports {sorted(cycle - CYCLE_TYPES)}"


READ_ONLY_SERVICES = {"governance.services.errors", "governance.services.limits"}
"""Service modules that write nothing: error types and number bounds."""
CHECKS = {("governance.services.shares", "validate_share_fields")}
"""Service functions that check without writing (the share preview validates as the share
service does)."""
WRITES = re.compile(
    r"objects\.(create|bulk_create|bulk_update|get_or_create|update_or_create)\b"
    r"|\.save\(|\.delete\(|\)\.update\(|audit\.record|send_task|apply_async|on_commit"
)
"""What writing (or queueing work) reads like in this code base."""


READERS = ("governance.selectors", "governance.web.presenters")
"""Modules that only read: the selectors, and the page presenters that shape their reads."""


def test_selectors_only_read() -> None:
    """A selector (or a page presenter) imports no service that writes, only error types,
    number bounds and checks that write nothing, and neither writes nor queues work itself
    (a measurement taken on a read, the first forecast of a job, is the scheduler's:
    ``scheduler/estimates.py``)."""
    for module in READ_ONLY_SERVICES:
        assert not WRITES.search(MODULES[module].read_text()), module
    for name, targets in GRAPH.items():
        if not name.startswith(READERS):
            continue
        for target in targets:
            if target.startswith("governance.services") and target not in READ_ONLY_SERVICES:
                names = _names_from(name, target)
                assert {(target, n) for n in names} <= CHECKS, f"{name} imports {target} {names}"
        assert not WRITES.search(MODULES[name].read_text()), f"{name} writes"


PRESENTERS = "governance.web.presenters"


def test_page_presenters_live_under_the_web() -> None:
    """What a page shows (usage bars, feed sentences, charts, rows with their words) is
    shaped under ``governance/web/presenters/``, not among the selectors: no selector is a
    ``web_`` module, and no selector imports ``governance.web``, so the reads the API
    shares with the pages never depend on a page."""
    assert "governance.web.presenters.overview" in GRAPH["governance.web.overview"]  # bites
    for name, targets in GRAPH.items():
        if not name.startswith("governance.selectors"):
            continue
        assert not name.rpartition(".")[2].startswith("web_"), f"{name} is a page presenter"
        web = sorted(t for t in targets if t.startswith("governance.web"))
        assert not web, f"{name} imports {web}"


DEMO = "governance.demo"
DEMO_USERS = {"governance.management.commands.load_demo", "scheduler.tasks"}
"""What may import the demo: the command that loads it and beat's demo tick."""


def test_the_demo_is_a_package_of_its_own() -> None:
    """The demo's data and weather live in ``governance/demo/``; the product never
    depends on them, so only the command that loads the demo and beat's demo task import
    it."""
    assert DEMO in GRAPH["governance.management.commands.load_demo"]  # the rule bites
    for name, targets in GRAPH.items():
        if name == DEMO or name.startswith(DEMO + "."):
            continue
        demo = {t for t in targets if t == DEMO or t.startswith(DEMO + ".")}
        assert not demo or name in DEMO_USERS, f"{name} imports {sorted(demo)}"


LONG_FUNCTION_LINES = 80
LONG_FUNCTION_ROOTS = ("scheduler", "governance/services")
LONG_BECAUSE = "Long because"


def _long_functions() -> Iterator[tuple[str, int, str | None]]:
    """Every function (nested ones too) over ``LONG_FUNCTION_LINES`` lines under
    ``LONG_FUNCTION_ROOTS``, as ``("path name", lines, docstring)``."""
    for root in LONG_FUNCTION_ROOTS:
        for path in sorted((ROOT / root).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONG_FUNCTION_LINES:
                    where = f"{path.relative_to(ROOT)} {node.name}"
                    yield where, lines, ast.get_docstring(node)


def test_a_long_function_says_why() -> None:
    """A function of the scheduler or the services over 80 lines says in its docstring
    why it is better whole ("Long because ...", docs/architecture.md#short-functions);
    any other is split into named steps."""
    long = list(_long_functions())
    unexplained = [
        f"{where} ({lines} lines)" for where, lines, doc in long if LONG_BECAUSE not in (doc or "")
    ]
    assert not unexplained, "split these or say why they are long:\n" + "\n".join(unexplained)
