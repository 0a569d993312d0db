"""The command line (validation, --explain, --check), the Engine API, and purity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduler.engine import Engine, InstanceType, Job, JobState, Preference, ShareConfig
from scheduler.simulate import validate
from tests.engine.helpers import EXAMPLES, G, itype, job, scenario, share

ROOT = Path(__file__).resolve().parents[2]


def cli(tmp_path: Path, data: object, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    return subprocess.run(
        [sys.executable, "-m", "scheduler.simulate", str(path), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_engine_imports_no_django() -> None:
    code = (
        "import scheduler.engine, scheduler.simulate, sys; "
        "assert not any(m.startswith('django') for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_unknown_type_names_the_field(tmp_path: Path) -> None:
    data = scenario([itype(G, 1)], [share("A", {G: 1})], [job("a", "A", [("x", 1)])])
    done = cli(tmp_path, data)
    assert done.returncode == 2
    assert done.stderr.strip() == "jobs[0].preferences[0].instance_type: unknown instance type 'x'"


def test_every_problem_on_its_own_line() -> None:
    data = scenario([itype(G, 1)], [share("A", {G: 1}, "NOPE")], [job("a", "B", bogus=1)])
    data["surprise"] = 1
    data["expect_whatever"] = []
    data["version"] = 1
    data["description"] = "fine"
    data["jobs"].append(
        {
            "id": "c",
            "share": "A",
            "submit_at": 0,
            "priority": 1,
            "count": 2,
            "duration": 5,
            "preferences": [{"instance_type": G, "count": 1}],
        }
    )
    problems = validate(data)
    assert "surprise: unknown field" in problems
    assert any(p.startswith("shares[0].policy:") for p in problems)
    assert "jobs[0].bogus: unknown field" in problems
    assert "jobs[0].share: unknown share 'B'" in problems
    assert any(p.startswith("jobs[1].preferences[0].count:") for p in problems)
    assert not any("expect_whatever" in p or "version" in p or "description" in p for p in problems)


def test_defaults_make_a_minimal_scenario_valid() -> None:
    data = {
        "instance_types": [{"name": G, "capacity": 1}],
        "shares": [{"name": "A", "limits": {G: 1}}],
        "jobs": [
            {
                "id": "a",
                "share": "A",
                "submit_at": 0,
                "priority": 0,
                "preferences": [{"instance_type": G, "count": 1}],
                "duration": 5,
            }
        ],
    }
    assert validate(data) == []


def test_explain_gives_actionable_messages(tmp_path: Path) -> None:
    data = scenario([itype(G, 1)], [share("A", {G: 1}, "LEND")], [job("a", "A"), job("b", "A")])
    done = cli(tmp_path, data, "--explain")
    assert done.returncode == 0
    pending = json.loads(done.stdout)["pending"]
    assert list(pending) == ["b"]
    (reason,) = pending["b"]
    assert reason["preference"] == 0 and reason["reason"] == "own_quota_full"
    assert "'A'" in reason["message"] and G in reason["message"]


def test_check_lists_mismatches(tmp_path: Path) -> None:
    data = scenario([itype(G, 1)], [share("A", {G: 1}, "LEND")], [job("a", "A")])
    data["expect"] = [{"type": "admitted", "job": "nobody"}]
    data["expect_jobs"] = {"a": {"state": "FAILED"}}
    data["expect_pending"] = {"a": ["own_quota_full"]}
    done = cli(tmp_path, data, "--check")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("expect[0]:")


def test_check_passes_on_an_example_scenario(tmp_path: Path) -> None:
    path = EXAMPLES / "worked_example.json"
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.simulate", str(path), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _engine() -> Engine:
    return Engine(
        [InstanceType(G, 2)],
        [
            ShareConfig("O", {G: 1}),
            ShareConfig("X", {G: 0}, policy="LEND_AND_BORROW", borrow_limit=-1),  # type: ignore[arg-type]
        ],
    )


def test_engine_api_schedule_copy_and_progress() -> None:
    engine = _engine()
    engine.set_share("X", policy="LEND_AND_BORROW")
    engine.submit(Job("x1", "X", 1, 0, (Preference(G, 1),), checkpoint_interval=10))
    decisions = engine.schedule(0)
    assert [(d.kind, d.job, d.borrowed, d.rule) for d in decisions] == [
        ("admitted", "x1", 1, "borrow")
    ]
    engine.report_progress("x1", 25, work_done=25, last_checkpoint=20)
    assert engine.lost_work_at(engine.job("x1"), 27) == 7
    preview = engine.copy()
    preview.set_share("O", limits={G: 2})
    preview.submit(Job("o1", "O", 1, 27, (Preference(G, 2),)))
    out = preview.schedule(27)
    assert [(d.kind, d.job, d.rule) for d in out] == [
        ("preempted", "x1", "reclaim"),
        ("admitted", "o1", "own"),
    ]
    assert out[0].lost_work == 7
    assert engine.job("x1").state is JobState.RUNNING  # the original is untouched
    assert engine.shares["O"].limits == {G: 1}
    assert (engine.share_limit("O", G), preview.share_limit("O", G)) == (1, 2)
    assert engine.share_limit("X", "no-such-type") == 0


def test_engine_restore_running_and_explain() -> None:
    engine = _engine()
    engine.set_share("X", policy="LEND_AND_BORROW")
    running = Job(
        "x1",
        "X",
        1,
        0,
        (Preference(G, 2),),
        state=JobState.RUNNING,
        instance_type=G,
        count=2,
        preference=0,
        run_started_at=0,
        started_at=0,
    )
    engine.restore([running])
    engine.submit(Job("o1", "O", 1, 5, (Preference(G, 2),)))
    assert engine.schedule(5) == []
    assert [r.reason for r in engine.explain("o1")] == ["own_quota_full"]
    rows = {r.share: r for r in engine.accounting(G)}
    assert (rows["X"].usage, rows["X"].borrowed, rows["O"].idle) == (2, 2, 1)


@pytest.mark.parametrize("bad", [{"version": 2}, {"until": -1}])
def test_top_level_checks(bad: dict[str, object]) -> None:
    data = scenario([itype(G, 1)], [share("A", {G: 1})], [job("a", "A")])
    data.update(bad)
    assert validate(data)


def _names_everywhere() -> dict[str, Any]:
    """A valid scenario in which every field that names something defined elsewhere in it
    (a type, a share, a plan, an action's type, a policy) appears once."""
    data = scenario(
        [itype(G, 4)],
        [share("A", {G: 2}, "LEND"), share("B", {G: 2})],
        [job("a", "A"), job("t", "B")],
    )
    data["jobs"][1]["preferences"] = [{"plan": "p", "count": 1}]
    data["plans"] = [
        {"name": "p", "instance_type": G, "share": "B", "count": 1, "start": 0, "end": 100}
    ]
    data["actions"] = [
        {"at": 1, "type": "set_share", "share": "A", "policy": "RESERVE"},
        {"at": 2, "type": "set_capacity", "instance_type": G, "capacity": 3},
        {"at": 3, "type": "set_plan", "plan": "p", "count": 2},
    ]
    return data


NAMED_FIELDS = [
    ("jobs", 0, "preferences", 0, "instance_type"),
    ("jobs", 0, "share"),
    ("jobs", 1, "preferences", 0, "plan"),
    ("plans", 0, "instance_type"),
    ("plans", 0, "share"),
    ("shares", 0, "policy"),
    ("actions", 0, "type"),
    ("actions", 0, "share"),
    ("actions", 0, "policy"),
    ("actions", 1, "instance_type"),
    ("actions", 2, "plan"),
]


def _where(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


@pytest.mark.parametrize("path", NAMED_FIELDS, ids=_where)
@pytest.mark.parametrize("wrong", [[G], {"name": G}, 7])
def test_a_name_of_the_wrong_type_is_a_field_error(path: tuple[str | int, ...], wrong: Any) -> None:
    """A field that names a type, share, plan, policy or action type, given as a list, an
    object or a number, is reported on that field (it used to raise TypeError: a list
    cannot be looked up among the names)."""
    data = _names_everywhere()
    assert validate(data) == []
    holder: Any = data
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = wrong
    problems = validate(data)
    assert any(p.startswith(f"{_where(path)}: ") for p in problems), problems


def test_the_command_line_names_a_list_given_for_an_instance_type(tmp_path: Path) -> None:
    data = scenario([itype(G, 1)], [share("A", {G: 1})], [job("a", "A")])
    data["jobs"][0]["preferences"][0]["instance_type"] = [G]
    done = cli(tmp_path, data)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "jobs[0].preferences[0].instance_type: must be the name of an instance type "
        "(a string), not a list"
    )
