"""What-if (docs/signals.md): a proposed configuration applied to an exported history, both
versions replayed through the engine, and the signals of each side by side with the
per-share differences in wait, turnaround, preemptions, goodput and cost.

Plain Python, no Django: it works on a history file as well as on a live queue's export
(``manage.py whatif`` takes either). A **proposal** is
``{"shares": {NAME: {field: value, ...}}, "capacity": {TYPE: count}}`` with share fields
as the scenario format has them (``policy``, ``borrow_limit``, ``limits``,
``in_share_preemption``, ``preemption_retries``), and
``borrow_requires_verified_recovery``, which sets ``may_borrow`` false (true: on) or
gives it back (false: off) for the share's jobs the history's ``recovery`` lists as
unverified (docs/workloads.md). The proposal holds for the whole
window: it replaces the shares' fields and the types' capacity at the start, is laid
over later edits of the same share fields, and later capacity changes of a proposed type
are dropped.
"""

from __future__ import annotations

import copy
import gc
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from scheduler import promises as promise_rules
from scheduler import signals, simulate

SHARE_FIELDS = ("policy", "borrow_limit", "limits", "in_share_preemption", "preemption_retries")
# Not a field of the scenario's shares: it acts on their jobs (``_gate_borrowing``).
RECOVERY_FIELD = "borrow_requires_verified_recovery"
Progress = Callable[[int, str], None]


class ProposalError(ValueError):
    """An invalid proposal; ``problems`` maps a field path to its message."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in problems.items()))
        self.problems = problems


def apply_proposal(
    scenario: Mapping[str, Any],
    proposal: Mapping[str, Any],
    *,
    unverified: Sequence[str] = (),
) -> dict[str, Any]:
    """A copy of ``scenario`` with the proposal in force over its whole time; ``unverified``
    are the ids of the jobs whose borrowing ``borrow_requires_verified_recovery`` gates."""
    problems: dict[str, str] = {}
    shares = proposal.get("shares") or {}
    capacity = proposal.get("capacity") or {}
    if not isinstance(shares, Mapping):
        raise ProposalError({"shares": "must map share names to their proposed fields"})
    if not isinstance(capacity, Mapping):
        raise ProposalError({"capacity": "must map instance types to counts"})
    out = copy.deepcopy(dict(scenario))
    by_name = {s["name"]: s for s in out["shares"]}
    types = {t["name"]: t for t in out["instance_types"]}
    for name, fields in shares.items():
        if name not in by_name:
            problems[f"shares.{name}"] = "no such share in this queue's history"
        elif not isinstance(fields, Mapping):
            problems[f"shares.{name}"] = "must be an object of share fields"
        else:
            for key in fields:
                if key == RECOVERY_FIELD:
                    if not isinstance(fields[key], bool):
                        problems[f"shares.{name}.{key}"] = "must be true or false"
                elif key not in SHARE_FIELDS:
                    problems[f"shares.{name}.{key}"] = "unknown field"
    for name, count in capacity.items():
        if name not in types:
            problems[f"capacity.{name}"] = "no such instance type in this queue's history"
        elif not isinstance(count, int) or isinstance(count, bool) or count < 0:
            problems[f"capacity.{name}"] = "must be a whole number, 0 or more"
    if problems:
        raise ProposalError(problems)
    plain = {
        name: {k: v for k, v in fields.items() if k != RECOVERY_FIELD}
        for name, fields in shares.items()
    }
    for name, fields in plain.items():
        by_name[name].update(copy.deepcopy(fields))
    _gate_borrowing(out, shares, set(unverified))
    for name, count in capacity.items():
        types[name]["capacity"] = count
    actions = []
    for action in out.get("actions") or []:
        if action["type"] == "set_capacity" and action["instance_type"] in capacity:
            continue
        if action["type"] == "set_share" and action["share"] in plain:
            action = {**action, **copy.deepcopy(plain[action["share"]])}
        actions.append(action)
    out["actions"] = actions
    checked = simulate.validate(out)
    if checked:
        raise ProposalError(
            {line.split(":", 1)[0]: line.split(":", 1)[-1].strip() for line in checked}
        )
    return out


def _gate_borrowing(
    scenario: dict[str, Any], shares: Mapping[str, Any], unverified: set[str]
) -> None:
    """``borrow_requires_verified_recovery`` proposed for a share: its unverified jobs
    (whose own ``may_borrow`` is true) get ``may_borrow`` false when it is on, and their
    own true back when it is off."""
    rules = {name: f[RECOVERY_FIELD] for name, f in shares.items() if RECOVERY_FIELD in f}
    if not rules:
        return
    for job in scenario["jobs"]:
        on = rules.get(job["share"])
        if on is None or str(job["id"]) not in unverified:
            continue
        if on:
            job["may_borrow"] = False
        else:
            job.pop("may_borrow", None)


def _median(block: Mapping[str, Any]) -> Any:
    return block.get("p50")


def differences(
    baseline: Mapping[str, Any], proposed: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Per share (and ``"(queue)"``): proposed - baseline for wait and turnaround (p50,
    p90), preemptions suffered, goodput and total cost; None where either side is."""

    def diff(a: Any, b: Any) -> Any:
        return None if a is None or b is None else b - a

    def one(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "wait_p50": diff(a["wait_to_start"]["all"]["p50"], b["wait_to_start"]["all"]["p50"]),
            "wait_p90": diff(a["wait_to_start"]["all"]["p90"], b["wait_to_start"]["all"]["p90"]),
            "turnaround_p50": diff(a["turnaround"]["all"]["p50"], b["turnaround"]["all"]["p50"]),
            "turnaround_p90": diff(a["turnaround"]["all"]["p90"], b["turnaround"]["all"]["p90"]),
            "preemptions": diff(
                a["preemptions_suffered"]["total"], b["preemptions_suffered"]["total"]
            ),
            "goodput": diff(a["goodput"], b["goodput"]),
            "cost": diff(a["cost"]["total"]["total"], b["cost"]["total"]["total"]),
            "jobs_finished": diff(a["jobs_finished"]["total"], b["jobs_finished"]["total"]),
        }

    out = {"(queue)": one(baseline["queue"], proposed["queue"])}
    after = {g["share"]: g for g in proposed["groups"]}
    for group in baseline["groups"]:
        if group["share"] in after:
            out[group["share"]] = one(group, after[group["share"]])
    return out


def replay(scenario: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events of one side, with the cyclic garbage collector paused (a replay frees
    nothing until it ends; collections over its growing heap only cost time)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return list(simulate.run(scenario)["events"])
    finally:
        if paused:
            gc.enable()


def _replay_both(
    first: Mapping[str, Any], second: Mapping[str, Any], tell: Progress
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both sides, in two processes when this one may start them (not inside a Celery
    prefork child, whose processes are daemons) and the machine has two cores."""
    parallel = not multiprocessing.current_process().daemon and (os.cpu_count() or 1) > 1
    if parallel:
        try:
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
                futures = [pool.submit(replay, first), pool.submit(replay, second)]
                wait(futures, return_when=FIRST_COMPLETED)
                tell(45, "one side replayed, waiting for the other")
                return futures[0].result(), futures[1].result()
        except (OSError, ValueError):
            pass  # no processes to be had here: one after the other
    base = replay(first)
    tell(45, "replaying it with the proposal")
    return base, replay(second)


def judge_promises(
    promises: Sequence[Mapping[str, Any]],
    sides: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> list[dict[str, Any]]:
    """Each promise (``{"group_by", "name", "figure", "comparison", "threshold", ...}``)
    with its value and state on each side; ``sides`` maps a side's name to its signals
    answers by grouping (``{"baseline": {"share": answer, "team": answer}, ...}``)."""
    out = []
    for promise in promises:
        row = dict(promise)
        for side, answers in sides.items():
            value, state = promise_rules.evaluate(
                answers[promise["group_by"]],
                group_by=promise["group_by"],
                name=promise["name"],
                figure=promise["figure"],
                comparison=promise["comparison"],
                threshold=float(promise["threshold"]),
            )
            row[side] = {"value": value, "state": state}
        out.append(row)
    return out


def run(
    history: Mapping[str, Any],
    proposal: Mapping[str, Any],
    *,
    progress: Progress | None = None,
    promises: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Replay ``history["scenario"]`` as it was and with ``proposal``; the signals of each
    over the whole window, and the differences. ``progress(percent, words)`` is told as
    each step ends. ``promises`` (of the agreements on the queue's shares) are judged on
    both sides over the what-if's window (``judge_promises``)."""
    tell = progress or (lambda percent, words: None)
    scenario = history["scenario"]
    teams = history.get("teams") or {}
    recovery = history.get("recovery") or {}
    proposed_scenario = apply_proposal(
        scenario, proposal, unverified=recovery.get("unverified") or ()
    )
    unit = signals.time_unit(scenario)
    until = scenario.get("until")
    tell(5, "replaying the history as it was and with the proposal")
    base_events, new_events = _replay_both(scenario, proposed_scenario, tell)
    tell(85, "computing the signals of both")
    end = int(until) + 1 if until is not None else None
    base_rec = signals.Recording(scenario, base_events, teams, end=end)
    new_rec = signals.Recording(proposed_scenario, new_events, teams, end=end)
    stop = signals.recording_end(base_rec)
    new_stop = signals.recording_end(new_rec)
    baseline = signals.compute(base_rec, 0, stop)
    proposed = signals.compute(new_rec, 0, new_stop)
    sides: dict[str, dict[str, Any]] = {
        "baseline": {"share": baseline},
        "proposed": {"share": proposed},
    }
    if any(p["group_by"] == "team" for p in promises or []):
        sides["baseline"]["team"] = signals.compute(base_rec, 0, stop, group_by="team")
        sides["proposed"]["team"] = signals.compute(new_rec, 0, new_stop, group_by="team")
    tell(100, "done")
    return {
        "proposal": dict(proposal),
        "time_unit_seconds": 1 / unit,
        "baseline": baseline,
        "proposed": proposed,
        "differences": differences(baseline, proposed),
        "promises": judge_promises(promises or [], sides),
        "events": {"baseline": len(base_events), "proposed": len(new_events)},
    }
