"""Each engine module on its own, as tables of cases: victim order, the minimal set,
searches, the candidate bound, frontiers and the class index, and the accounting the
engine decides with (the same figures the pages show)."""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from fractions import Fraction

import pytest

from scheduler.engine import accounting
from scheduler.engine.candidates import FAR, CandidateIndex, Frontier, JobClass, cycle_key
from scheduler.engine.model import InstanceType, Job, JobState, Policy, Preference, ShareConfig
from scheduler.engine.placement import (
    bound,
    fits,
    largest_possible,
    maxfit,
    own_possible,
)
from scheduler.engine.preemption import capacity_lost, give_back, search, victim_order
from scheduler.engine.state import Pool, pool_facts
from tests.engine.helpers import G

LBB = Policy.LEND_AND_BORROW


def running(job_id: str, share: str, count: int = 1, prio: int = 1, started: int = 0) -> Job:
    return Job(
        job_id,
        share,
        prio,
        0,
        (Preference(G, count),),
        state=JobState.RUNNING,
        instance_type=G,
        count=count,
        run_started_at=started,
        progress_at=started,
    )


def pool_of(capacity: int, shares: list[ShareConfig], jobs: list[Job]) -> Pool:
    pool = Pool(InstanceType(G, capacity), {s.name: s for s in shares})
    for job in jobs:
        pool.add(job)
    return pool


# ---------------------------------------------------------------------------- victim order

VICTIM_ORDER = [
    # (priority, lost work, started, id) per job, expected order of ids
    ([(2, 0, 0, "a"), (1, 0, 0, "b")], ["b", "a"]),  # lower priority first
    ([(1, 5, 0, "a"), (1, 3, 0, "b")], ["b", "a"]),  # then least work lost
    ([(1, 3, 10, "a"), (1, 3, 20, "b")], ["b", "a"]),  # then most recently started
    ([(1, 3, 10, "a"), (1, 3, 10, "b")], ["b", "a"]),  # then id descending
    ([(1, Fraction(1, 2), 0, "a"), (1, 0, 0, "b"), (0, 9, 0, "c")], ["c", "b", "a"]),
    ([(3, 0, 5, "x10"), (3, 0, 5, "x9")], ["x9", "x10"]),  # ids compare as strings
]


@pytest.mark.parametrize(("rows", "expected"), VICTIM_ORDER)
def test_victim_order(
    rows: list[tuple[int, int | Fraction, int, str]], expected: list[str]
) -> None:
    jobs = [running(job_id, "S", prio=prio, started=started) for prio, _, started, job_id in rows]
    lost = {job_id: work for _, work, _, job_id in rows}
    assert [j.id for j in victim_order(jobs, lambda j: lost[j.id])] == expected


# ---------------------------------------------------------------------------- minimal set

GIVE_BACK = [
    # counts picked in order, instances needed, counts kept (reverse pick order gives back)
    ([1, 2, 4], 4, [4]),
    ([4, 2, 1], 4, [4]),
    ([1, 1, 1], 2, [1, 1]),
    ([2, 1, 2], 3, [2, 1]),
    ([3], 3, [3]),
]


@pytest.mark.parametrize(("picked", "need", "kept"), GIVE_BACK)
def test_give_back_in_reverse_pick_order(picked: list[int], need: int, kept: list[int]) -> None:
    picks = list(picked)
    freed = sum(picks)

    def keeps_fit(count: int) -> bool:
        nonlocal freed
        if freed - count >= need:
            freed -= count
            return True
        return False

    give_back(picks, keeps_fit)
    assert picks == kept


CAPACITY_LOST = [
    # capacity after the drop, running (id, share, count, prio), expected victims
    (2, [("o1", "O", 1, 1), ("b1", "B", 1, 5), ("b2", "B", 1, 5)], ["b2"]),  # borrowers first
    (1, [("o1", "O", 1, 1), ("b1", "B", 1, 5), ("b2", "B", 1, 5)], ["b2", "b1"]),
    (0, [("o1", "O", 1, 1), ("b1", "B", 1, 5), ("b2", "B", 1, 5)], ["b2", "b1", "o1"]),  # any
    (2, [("o1", "O", 2, 1), ("b1", "B", 2, 5)], ["b1"]),
    (3, [("b1", "B", 1, 5), ("b2", "B", 2, 5), ("o1", "O", 1, 1)], ["b2"]),  # minimal
]


@pytest.mark.parametrize(("capacity", "jobs", "expected"), CAPACITY_LOST)
def test_capacity_lost(
    capacity: int, jobs: list[tuple[str, str, int, int]], expected: list[str]
) -> None:
    shares = [ShareConfig("O", {G: 2}, Policy.LEND), ShareConfig("B", {G: 0}, LBB)]
    pool = pool_of(
        10, shares, [running(i, s, c, p, started=n) for n, (i, s, c, p) in enumerate(jobs)]
    )
    excess = pool.total - capacity
    victims = capacity_lost({s.name: s for s in shares}, pool, lambda j: 0, excess)
    assert [v.id for v in victims] == expected


# ---------------------------------------------------------------------------- searches

SEARCHES = [
    # shares (name, limit, policy, in-share), running (id, share, count, prio),
    # capacity, (share, count, priority) -> victims (id, rule) and borrowed, or None
    (
        [("O", 2, Policy.LEND, False), ("B", 0, LBB, False)],
        [("b1", "B", 1, 9), ("b2", "B", 1, 9)],
        2,
        ("O", 2, 1),
        ([("b2", "reclaim"), ("b1", "reclaim")], 0),
    ),
    (  # reclaim only for an own placement: O at its limit may not reclaim
        [("O", 1, LBB, False), ("B", 0, LBB, False)],
        [("o1", "O", 1, 1), ("b1", "B", 1, 9)],
        2,
        ("O", 1, 5),
        None,
    ),
    (  # in-share: strictly lower priority only
        [("O", 2, Policy.LEND, True)],
        [("o1", "O", 1, 3), ("o2", "O", 1, 5)],
        2,
        ("O", 1, 5),
        ([("o1", "priority")], 0),
    ),
    (  # in-share may make room for a borrowing placement of a LEND_AND_BORROW share
        [("O", 1, LBB, True)],
        [("o1", "O", 2, 1)],
        2,
        ("O", 1, 5),
        ([("o1", "priority")], 0),
    ),
    (  # a job asking more than its share's limit may not preempt
        [("O", 1, Policy.LEND, True)],
        [("o1", "O", 1, 1)],
        1,
        ("O", 2, 5),
        None,
    ),
    (  # minimal set: the big victim alone is enough once the small one is given back
        [("O", 3, Policy.LEND, False), ("B", 0, LBB, False)],
        [("b1", "B", 1, 2), ("b2", "B", 3, 1)],
        4,
        ("O", 3, 1),
        ([("b2", "reclaim")], 0),
    ),
]


@pytest.mark.parametrize(("share_rows", "jobs", "capacity", "ask", "expected"), SEARCHES)
def test_search(
    share_rows: list[tuple[str, int, Policy, bool]],
    jobs: list[tuple[str, str, int, int]],
    capacity: int,
    ask: tuple[str, int, int],
    expected: tuple[list[tuple[str, str]], int] | None,
) -> None:
    shares = {
        n: ShareConfig(n, {G: lim}, policy, borrow_limit=-1, in_share_preemption=inshare)
        for n, lim, policy, inshare in share_rows
    }
    pool = pool_of(capacity, list(shares.values()), [running(*row) for row in jobs])
    facts = pool_facts(pool)
    share, count, priority = ask
    found = search(
        shares,
        pool,
        facts,
        lambda j: 0,
        bound(shares, pool, facts, share),
        share,
        count,
        priority,
        set(),
    )
    if expected is None:
        assert found is None
    else:
        assert found is not None
        victims, borrowed = found
        assert ([(v.id, rule) for v, rule in victims], borrowed) == expected


# ---------------------------------------------------------------------------- candidate bound

BOUND_STATES = [
    # shares (name, limit, policy, borrow limit, in-share), running (id, share, count, prio),
    # capacity, share asked about, largest count it could place
    ([("A", 4, Policy.LEND, -1, False)], [], 3, "A", 3),
    ([("A", 4, Policy.LEND, -1, False)], [("a1", "A", 3, 1)], 4, "A", 1),
    ([("A", 4, Policy.LEND, -1, True)], [("a1", "A", 3, 1)], 4, "A", 4),  # with its victims
    ([("A", 1, LBB, -1, False)], [], 6, "A", 6),
    ([("A", 2, LBB, 50, False)], [], 6, "A", 3),
    ([("A", 2, Policy.RESERVE, -1, False), ("B", 3, Policy.RESERVE, -1, False)], [], 4, "A", 1),
    (  # reclaim from a borrower: at most its borrowed amount plus one job
        [("O", 4, Policy.LEND, -1, False), ("B", 1, LBB, -1, False)],
        [("b1", "B", 2, 1), ("b2", "B", 2, 1)],
        4,
        "O",
        4,
    ),
    ([("A", 2, Policy.LEND, -1, False), ("N", 0, LBB, 100, False)], [], 5, "N", 0),
]


@pytest.mark.parametrize(("share_rows", "jobs", "capacity", "share", "largest"), BOUND_STATES)
def test_candidate_bound_is_exact_and_sound(
    share_rows: list[tuple[str, int, Policy, int, bool]],
    jobs: list[tuple[str, str, int, int]],
    capacity: int,
    share: str,
    largest: int,
) -> None:
    shares = {
        n: ShareConfig(n, {G: lim}, policy, borrow_limit=pct, in_share_preemption=inshare)
        for n, lim, policy, pct, inshare in share_rows
    }
    pool = pool_of(capacity, list(shares.values()), [running(*row) for row in jobs])
    facts = pool_facts(pool)
    assert largest_possible(shares, pool, facts, share) == largest
    # sound: no count above it fits at any priority; the bound itself is reached
    fitting = [
        count
        for count in range(1, capacity + 3)
        for prio in (0, 5, 100)
        if fits(shares, pool, facts, lambda j: 0, share, count, prio, set())
    ]
    assert max(fitting, default=0) <= max(largest, 0)


OWN_POSSIBLE = [
    # limit, usage by lower-priority jobs (prio 1), in-share, count, priority, possible
    (4, 3, False, 1, 5, True),
    (4, 3, False, 2, 5, False),
    (4, 3, True, 2, 5, True),  # its own lower-priority jobs could make room
    (4, 3, True, 2, 1, False),  # not strictly lower
    (0, 0, False, 1, 5, False),
]


@pytest.mark.parametrize(("limit", "used", "inshare", "count", "prio", "possible"), OWN_POSSIBLE)
def test_own_possible(
    limit: int, used: int, inshare: bool, count: int, prio: int, possible: bool
) -> None:
    shares = {"A": ShareConfig("A", {G: limit}, LBB, in_share_preemption=inshare)}
    pool = pool_of(10, list(shares.values()), [running(f"a{i}", "A") for i in range(used)])
    assert own_possible(shares, pool, "A", count, prio) is possible


# ---------------------------------------------------------------------------- frontiers and classes

FRONTIER = [
    # entries {count: priority}, (count, priority) asked, covered
    ({2: 5}, (2, 5), True),
    ({2: 5}, (3, 1), True),  # asking more at a lower priority
    ({2: 5}, (1, 1), False),  # asking less may fit
    ({2: 5}, (2, 6), False),  # a higher priority may fit
    ({1: 3, 4: 9}, (4, 8), True),
    ({1: 3, 4: 9}, (2, 8), False),
    ({3: FAR}, (5, 9999), True),
]


@pytest.mark.parametrize(("entries", "ask", "covered"), FRONTIER)
def test_frontier_covers(entries: dict[int, int], ask: tuple[int, int], covered: bool) -> None:
    assert Frontier(0, dict(entries)).covers(*ask) is covered


def pending(job_id: str, prio: int, at: int, prefs: list[tuple[str, int]]) -> Job:
    return Job(job_id, "S", prio, at, tuple(Preference(t, n) for t, n in prefs))


def test_classes_hold_jobs_by_smallest_count_in_cycle_order() -> None:
    index = CandidateIndex()
    jobs = [
        pending("a", 1, 0, [(G, 2)]),
        pending("b", 5, 3, [(G, 4), ("P", 1), (G, 2)]),
        pending("c", 5, 1, [(G, 2)]),
        pending("d", 5, 1, [(G, 1)]),
    ]
    for job in jobs:
        index.add(job)
    by_count = {cls.count: [j.id for j in cls.jobs] for cls in index.classes_of((G, "S"))}
    assert by_count == {1: ["d"], 2: ["c", "b", "a"]}
    assert [c.count for c in index.classes_of(("P", "S"))] == [1]
    index.remove(jobs[2])
    assert [j.id for j in index.classes_of((G, "S"))[1].jobs] == ["b", "a"]
    assert cycle_key(jobs[0]) == (-1, 0, "a")


@pytest.mark.parametrize("seed", range(20))
def test_class_positions_match_a_plain_bisection(seed: int) -> None:
    """A class finds a key through its ranks (priority first, then the first and last
    place among the jobs of that priority): seeded random inserts and removals with few
    priorities and many ties on submission time, every position asked checked against
    ``bisect`` on the keys themselves."""
    rng = random.Random(seed)
    cls = JobClass(G, "S", 1)
    jobs: list[Job] = []
    for step in range(300):
        if jobs and rng.random() < 0.35:
            job = jobs.pop(rng.randrange(len(jobs)))
            cls.discard(cycle_key(job))
        else:
            prio = rng.choice([0, 1, 2, 5, 50, 51])
            job = pending(f"j{rng.randrange(10**6):06d}", prio, rng.randrange(8), [(G, 1)])
            if any(j.id == job.id for j in jobs):
                continue
            key = cycle_key(job)
            assert cls.add(job, key) == bisect_left(cls.keys, key)
            jobs.append(job)
        assert cls.keys == sorted(cycle_key(j) for j in jobs)
        assert cls.ranks == [k[0] for k in cls.keys]
        assert [j.id for j in cls.jobs] == [k[2] for k in cls.keys]
        for _ in range(3):
            probe = (-rng.choice([0, 1, 2, 3, 5, 50, 51]), rng.randrange(9), f"j{step}")
            if cls.keys and rng.random() < 0.5:
                probe = rng.choice(cls.keys)
            assert cls.index_from(probe) == bisect_left(cls.keys, probe)
            assert cls.index_from(probe, inclusive=False) == bisect_right(cls.keys, probe)


EASING = [
    # change after the proof: (only_for share or None), still covered for S
    (None, False),  # may help every share
    ("S", False),  # may help S
    ("T", True),  # helps only another share: the proof stands
]


@pytest.mark.parametrize(("only_for", "covered"), EASING)
def test_proofs_last_until_a_change_may_help(only_for: str | None, covered: bool) -> None:
    index = CandidateIndex()
    index.add(pending("a", 1, 0, [(G, 2)]))
    index.prove((G, "S"), 2, 1, clock=1)
    assert index.covered((G, "S"), 2, 1)
    index.eased(G, only_for, clock=2)
    assert index.covered((G, "S"), 2, 1) is covered


def test_an_easing_above_a_priority_keeps_the_proofs_up_to_it() -> None:
    """An admission of S within its limit at priority 30 is a possible victim of S's
    jobs above 30 only: proofs for S's jobs at 30 or below stand, the others go."""
    index = CandidateIndex()
    index.add(pending("a", 50, 0, [(G, 2)]))
    index.prove((G, "S"), 2, 50, clock=1)
    index.eased(G, "S", clock=2, above=30)
    assert index.covered((G, "S"), 2, 30)
    assert not index.covered((G, "S"), 2, 31)
    assert (G, "S") in index.maybe_live  # its jobs above 30 are looked at again


def test_only_a_job_first_in_its_class_wakes_its_pair_between_cycles() -> None:
    index = CandidateIndex()
    index.add(pending("a", 50, 0, [(G, 2)]))
    assert index.take_maybe_live() == [(G, "S")]
    index.add(pending("b", 10, 1, [(G, 2)]))  # behind "a": ruled out with it
    assert index.take_maybe_live() == []
    index.add(pending("c", 90, 2, [(G, 2)]))  # ahead of "a": a new first job
    assert index.take_maybe_live() == [(G, "S")]
    index.log = []  # in a cycle (a victim waiting again) every job wakes its pair
    index.add(pending("d", 5, 3, [(G, 2)]))
    assert index.take_maybe_live() == [(G, "S")]


def test_a_change_wakes_only_pairs_that_may_place_and_have_pending_jobs() -> None:
    index = CandidateIndex(placeable=lambda pool, share: pool == G)
    job = pending("a", 1, 0, [(G, 2), ("P", 1)])
    index.add(job)
    assert index.take_maybe_live() == [(G, "S")]  # no limit on P: never woken there
    index.eased("P", None, clock=1)
    assert index.take_maybe_live() == []
    index.remove(job)
    index.eased(G, None, clock=2)
    assert index.take_maybe_live() == []  # no pending job of S left on G
    index.add(pending("b", 1, 1, [(G, 2)]))
    index.eased(G, None, clock=3)
    assert index.take_maybe_live() == [(G, "S")]


# ---------------------------------------------------------------------------- accounting

ACCOUNTS = [
    # capacity, shares (name, limit, policy), usage per share
    (10, [("R", 4, "RESERVE"), ("L", 3, "LEND"), ("X", 0, "LEND_AND_BORROW")], {"R": 1, "X": 2}),
    (5, [("R", 4, "RESERVE"), ("Q", 4, "RESERVE")], {"R": 4}),
    (3, [("A", 4, "LEND"), ("B", 4, "LEND_AND_BORROW")], {"A": 1, "B": 2}),
    (4, [("R", 6, "RESERVE"), ("B", 1, "LEND_AND_BORROW")], {"B": 3}),  # oversubscribed
]


@pytest.mark.parametrize(("capacity", "share_rows", "usage"), ACCOUNTS)
def test_engine_free_is_the_accounting_free(
    capacity: int, share_rows: list[tuple[str, int, str]], usage: dict[str, int]
) -> None:
    shares = {n: ShareConfig(n, {G: lim}, Policy(p)) for n, lim, p in share_rows}
    jobs = [running(f"{n}{i}", n) for n, used in usage.items() for i in range(used)]
    pool = pool_of(capacity, list(shares.values()), jobs)
    facts = pool_facts(pool)
    account = accounting.account_type(
        capacity,
        [accounting.ShareOnType(n, p, lim, usage.get(n, 0)) for n, lim, p in share_rows],
    )
    rows = {row.key: row for row in account.shares}
    for name, cfg in shares.items():
        fit = maxfit(shares, pool, facts, name)
        if cfg.policy is LBB:  # unlimited borrowing: everything free(S,T) holds
            assert fit == rows[name].free
        else:  # within its limit and within free(S,T)
            assert max(fit, 0) == min(rows[name].free, rows[name].idle)
    assert facts.reserve_idle == sum(
        accounting.reserved_idle(p, lim, usage.get(n, 0)) for n, lim, p in share_rows
    )
