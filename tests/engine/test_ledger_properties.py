"""The lending ledger over random recorded histories: every borrowed instance-second of
the recorded runs is attributed exactly once (a borrower's ledger rows add up to its
borrowed instance-seconds, exactly, and to what the signals count), and a lender's rows
add up to the ``lent`` figure the pages show, integrated over the window."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import ledger, signals
from scheduler.engine import accounting

TYPES = ("A", "B")
POLICIES = ("RESERVE", "LEND", "LEND_AND_BORROW")


@st.composite
def histories(draw: Any) -> dict[str, Any]:
    types = TYPES[: draw(st.integers(1, 2))]
    capacity = {t: draw(st.integers(1, 8)) for t in types}
    names = [f"s{i}" for i in range(draw(st.integers(2, 4)))]

    def limits() -> dict[str, int]:
        chosen = draw(st.lists(st.sampled_from(types), min_size=1, unique=True))
        return {t: draw(st.integers(0, 4)) for t in chosen}

    shares = [
        {"name": n, "policy": draw(st.sampled_from(POLICIES)), "limits": limits()} for n in names
    ]
    actions = []
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, 200))
        if draw(st.booleans()):
            t = draw(st.sampled_from(types))
            actions.append(
                {
                    "at": at,
                    "type": "set_capacity",
                    "instance_type": t,
                    "capacity": draw(st.integers(0, 8)),
                }
            )
        else:
            change: dict[str, Any] = {
                "at": at,
                "type": "set_share",
                "share": draw(st.sampled_from(names)),
            }
            if draw(st.booleans()):
                change["limits"] = limits()
            else:
                change["policy"] = draw(st.sampled_from(POLICIES))
            actions.append(change)
    actions.sort(key=lambda a: a["at"])
    jobs, events = [], []
    for j in range(draw(st.integers(0, 8))):
        share = draw(st.sampled_from(names))
        t = draw(st.integers(0, 150))
        jobs.append(
            {
                "id": f"j{j}",
                "share": share,
                "submit_at": t,
                "priority": 1,
                "duration": 1000,
                "preferences": [{"instance_type": types[0], "count": 1}],
            }
        )
        for run in range(draw(st.integers(1, 3))):
            t += draw(st.integers(0, 20))
            kind = draw(st.sampled_from(types))
            count = draw(st.integers(1, 4))
            events.append(
                {"at": t, "type": "admitted", "job": f"j{j}", "instance_type": kind, "count": count}
            )
            t += draw(st.integers(1, 60))
            last = run == 2 or draw(st.booleans())
            if last and draw(st.booleans()):
                break  # still running at the end of the recording
            end = (
                draw(st.sampled_from(("completed", "failed", "cancelled"))) if last else "preempted"
            )
            events.append(
                {"at": t, "type": end, "job": f"j{j}", "reason": "reclaim", "lost_work": 0}
            )
            if last:
                break
    events.sort(key=lambda e: e["at"])
    scenario = {
        "instance_types": [{"name": t, "capacity": capacity[t]} for t in types],
        "shares": shares,
        "jobs": jobs,
        "actions": actions,
    }
    start = draw(st.integers(0, 150))
    return {
        "scenario": scenario,
        "events": events,
        "start": start,
        "stop": start + draw(st.integers(1, 150)),
        "end": draw(st.integers(1, 320)),
    }


def by_hand(h: dict[str, Any]) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """Borrowed instance-time per (share, type) from the runs, and lent per (lender,
    type) from ``account_type``, interval by interval with the state at the end of each
    interval's first instant."""
    sc = h["scenario"]
    owner = {j["id"]: j["share"] for j in sc["jobs"]}
    runs = []  # (share, type, count, from, to)
    open_runs: dict[str, tuple[str, int, int]] = {}
    for e in h["events"]:
        if e["type"] == "admitted":
            open_runs[e["job"]] = (e["instance_type"], e["count"], e["at"])
        elif e["job"] in open_runs:
            t, n, since = open_runs.pop(e["job"])
            runs.append((owner[e["job"]], t, n, since, e["at"]))
    for job, (t, n, since) in open_runs.items():
        runs.append((owner[job], t, n, since, 10**9))
    hi = min(h["stop"], h["end"])
    times = sorted(
        {h["start"], hi} | {e["at"] for e in h["events"]} | {a["at"] for a in sc["actions"]}
    )
    borrowed: dict[tuple[str, str], int] = defaultdict(int)
    lent: dict[tuple[str, str], int] = defaultdict(int)
    names = sorted(s["name"] for s in sc["shares"])
    for a, b in itertools.pairwise(times):
        dt = min(b, hi) - max(a, h["start"])
        if dt <= 0:
            continue
        cap = {t["name"]: t["capacity"] for t in sc["instance_types"]}
        lim = {s["name"]: dict(s["limits"]) for s in sc["shares"]}
        pol = {s["name"]: s["policy"] for s in sc["shares"]}
        for act in sc["actions"]:
            if act["at"] <= a:
                if act["type"] == "set_capacity":
                    cap[act["instance_type"]] = act["capacity"]
                elif "limits" in act:
                    lim[act["share"]] = dict(act["limits"])
                else:
                    pol[act["share"]] = act["policy"]
        for t in cap:
            usage = {
                n: sum(r[2] for r in runs if r[0] == n and r[1] == t and r[3] <= a < r[4])
                for n in names
            }
            for n in names:
                borrowed[(n, t)] += accounting.borrowed(lim[n].get(t, 0), usage[n]) * dt
            account = accounting.account_type(
                cap[t],
                [accounting.ShareOnType(n, pol[n], lim[n].get(t), usage[n]) for n in names],
            )
            for row in account.shares:
                lent[(row.key, t)] += row.lent * dt
    return borrowed, lent


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_ledger_sums_equal_the_borrowed_instance_seconds_of_the_runs(h: dict[str, Any]) -> None:
    led = ledger.compute(h["scenario"], h["events"], h["start"], h["stop"], h["end"])
    borrowed, lent = by_hand(h)
    held_by: dict[tuple[str, str], int] = defaultdict(int)
    lent_by: dict[tuple[str, str], int] = defaultdict(int)
    for (borrower, lender, source, t), amount in led.held.items():
        held_by[(borrower, t)] += amount
        if lender is not None:
            assert source == accounting.LENDER
            lent_by[(lender, t)] += amount
        else:
            assert source in (accounting.UNOWNED, accounting.BEYOND)
    assert {k: v for k, v in held_by.items() if v} == {k: v for k, v in borrowed.items() if v}
    assert {k: v for k, v in lent_by.items() if v} == {k: v for k, v in lent.items() if v}
    # And what the signals count as borrowed instance-seconds, share by share.
    answer = signals.compute(
        signals.Recording(scenario=h["scenario"], events=h["events"], teams={}, end=h["end"]),
        h["start"],
        h["stop"],
    )
    for group in answer["groups"]:
        for t, seconds in group["instance_seconds"].items():
            assert abs(seconds["borrowed"] - held_by.get((group["share"], t), 0)) < 1e-6


def test_two_lenders_of_one_type_are_filled_in_name_order() -> None:
    shares = [
        accounting.ShareOnType("b-lend", "LEND", 3, 0),
        accounting.ShareOnType("a-lend", "LEND", 2, 1),
        accounting.ShareOnType("x", "LEND_AND_BORROW", 0, 2),
        accounting.ShareOnType("keep", "RESERVE", 2, 0),
        accounting.ShareOnType("y", "LEND_AND_BORROW", 1, 4),
    ]
    ordered = sorted(shares, key=lambda s: s.key)
    rows = accounting.lending(9, ordered)  # limits 8 of 9: one instance no share owns
    assert [(r.borrower, r.source, r.lender, r.count) for r in rows] == [
        ("x", accounting.UNOWNED, None, 1),
        ("x", accounting.LENDER, "a-lend", 1),
        ("y", accounting.LENDER, "b-lend", 3),
    ]
    rows = accounting.lending(5, ordered)  # oversubscribed: beyond every lendable source
    assert rows[-1] == accounting.Lending("y", accounting.BEYOND, None, 1)
