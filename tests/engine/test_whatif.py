"""What-if on a history file: the proposal in force over the whole window, both sides
replayed, and the differences (the small history of ``test_signals.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler import simulate, whatif

DATA = json.loads((Path(__file__).parent / "data" / "signals_small.json").read_text())


def test_the_proposal_holds_over_the_whole_window() -> None:
    proposal = {"shares": {"bor": {"borrow_limit": -1}}, "capacity": {"B": 1}}
    out = whatif.apply_proposal(DATA["scenario"], proposal)
    bor = next(s for s in out["shares"] if s["name"] == "bor")
    assert bor["borrow_limit"] == -1
    assert next(t for t in out["instance_types"] if t["name"] == "B")["capacity"] == 1
    kinds = [a["type"] for a in out["actions"]]
    assert "set_capacity" not in kinds  # B's later change is replaced by the proposal
    edit = next(a for a in out["actions"] if a["type"] == "set_share")
    assert edit["borrow_limit"] == -1 and edit["limits"] == {"A": 1, "B": 0}
    assert DATA["scenario"]["shares"][1]["borrow_limit"] == 100  # the input is untouched


@pytest.mark.parametrize(
    ("proposal", "field"),
    [
        ({"shares": {"nobody": {"policy": "LEND"}}}, "shares.nobody"),
        ({"shares": {"bor": {"colour": "red"}}}, "shares.bor.colour"),
        ({"capacity": {"Z": 1}}, "capacity.Z"),
        ({"capacity": {"A": -1}}, "capacity.A"),
        ({"shares": {"bor": {"policy": "SHARE_ALL"}}}, "shares[1].policy"),
    ],
)
def test_invalid_proposals_name_the_field(proposal: dict, field: str) -> None:
    with pytest.raises(whatif.ProposalError) as caught:
        whatif.apply_proposal(DATA["scenario"], proposal)
    assert field in caught.value.problems


def test_both_sides_and_their_differences() -> None:
    steps: list[int] = []
    result = whatif.run(
        {"scenario": DATA["scenario"], "teams": DATA["teams"]},
        {"shares": {"bor": {"borrow_limit": -1}}},
        progress=lambda percent, words: steps.append(percent),
    )
    assert steps == [5, 45, 85, 100]
    assert result["events"]["baseline"] == len(DATA["recorded"])  # as it was: as recorded
    base_bor = next(g for g in result["baseline"]["groups"] if g["share"] == "bor")
    assert base_bor["jobs_finished"]["total"] == 4
    # with unlimited borrowing, b3 (A x3, waiting for ever) runs from 65 s and completes
    new = simulate.run(whatif.apply_proposal(DATA["scenario"], result["proposal"]))
    assert {"at": 65, "type": "admitted", "job": "b3", "instance_type": "A", "count": 3,
            "preference": 0, "borrowed": 2} in new["events"]  # fmt: skip
    diff = result["differences"]["bor"]
    assert diff["jobs_finished"] == 1
    assert diff["cost"] == pytest.approx(3 * 10 * 0.001)  # b3: 3 x A for 10 s
    assert result["differences"]["own"]["preemptions"] == 0


def test_one_after_the_other_gives_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    history = {"scenario": DATA["scenario"], "teams": DATA["teams"]}
    proposal = {"shares": {"bor": {"borrow_limit": -1}}}
    together = whatif.run(history, proposal)
    monkeypatch.setattr(whatif.os, "cpu_count", lambda: 1)  # no second core: no processes
    steps: list[int] = []
    alone = whatif.run(history, proposal, progress=lambda p, w: steps.append(p))
    assert alone == together
    assert steps == [5, 45, 85, 100]


def test_borrowing_requires_verified_recovery_gates_the_unverified_jobs() -> None:
    """On: the share's jobs the history lists as unverified replay with may_borrow false
    (b3 then never borrows); off again: they take back their own may_borrow."""
    on = whatif.apply_proposal(
        DATA["scenario"],
        {"shares": {"bor": {"borrow_requires_verified_recovery": True}}},
        unverified=["b3", "o1"],
    )
    jobs = {j["id"]: j for j in on["jobs"]}
    assert jobs["b3"]["may_borrow"] is False
    assert "may_borrow" not in jobs["o1"]  # another share's job: untouched
    assert "borrow_requires_verified_recovery" not in next(
        s for s in on["shares"] if s["name"] == "bor"
    )
    off = whatif.apply_proposal(
        on, {"shares": {"bor": {"borrow_requires_verified_recovery": False}}}, unverified=["b3"]
    )
    assert "may_borrow" not in next(j for j in off["jobs"] if j["id"] == "b3")
    with pytest.raises(whatif.ProposalError) as caught:
        whatif.apply_proposal(
            DATA["scenario"], {"shares": {"bor": {"borrow_requires_verified_recovery": "on"}}}
        )
    assert "shares.bor.borrow_requires_verified_recovery" in caught.value.problems
