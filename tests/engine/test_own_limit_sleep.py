"""A share that cannot borrow, at its limit, sleeps through other shares' changes
(docs/scheduling.md#inside-the-engine) and wakes on its own: a completion of one of its
jobs, a raised limit, a re-prioritised running job it may then preempt, a new job that
may preempt in-share. Every step is also run by ``Engine(incremental=False)``, which
examines every pending job at every cycle: both give the same decisions."""

from __future__ import annotations

from scheduler.engine import (
    DecisionKind,
    Engine,
    InstanceType,
    Job,
    Policy,
    Preference,
    Rule,
    ShareConfig,
)

G = "g"


def _engine(incremental: bool) -> Engine:
    # capacity beyond both limits: only A's own limit keeps its jobs waiting
    return Engine(
        [InstanceType(G, 10)],
        [
            ShareConfig("A", {G: 2}, Policy.RESERVE, in_share_preemption=True),
            ShareConfig("B", {G: 4}, Policy.LEND),
        ],
        incremental=incremental,
    )


def _job(job_id: str, share: str, priority: int, at: int) -> Job:
    return Job(job_id, share, priority, at, (Preference(G, 1),))


def _play(incremental: bool) -> list[dict[str, object]]:
    engine = _engine(incremental)
    out = []
    for job in [_job("a1", "A", 5, 0), _job("a2", "A", 5, 0), _job("a3", "A", 1, 0)]:
        engine.submit(job)
    for i in range(4):
        engine.submit(_job(f"b{i}", "B", 0, 0))
    out += engine.schedule(0)
    # B comes and goes: nothing of A's changes, a3 keeps waiting
    for t in range(1, 4):
        out += engine.complete(f"b{t - 1}", t)
        engine.submit(_job(f"b{t + 3}", "B", 0, t))
        out += engine.schedule(t)
    out += engine.complete("a1", 4)  # its own completion: a3 starts
    out += engine.schedule(4)
    engine.submit(_job("a4", "A", 1, 5))
    out += engine.schedule(5)
    engine.set_share("A", limits={G: 3})  # a raised limit: a4 starts
    out += engine.schedule(6)
    engine.submit(_job("a5", "A", 1, 7))
    out += engine.schedule(7)
    engine.set_priority("a3", 0)  # below a5 now: a5 preempts it in-share
    out += engine.schedule(8)
    engine.submit(_job("a6", "A", 9, 9))  # a new job above a running one
    out += engine.schedule(9)
    return [d.to_event() for d in out]


def test_a_share_at_its_limit_wakes_on_its_own_changes_only() -> None:
    events = _play(incremental=True)
    assert events == _play(incremental=False)
    started = [(e["at"], e["job"]) for e in events if e["type"] == DecisionKind.ADMITTED]
    a_started = [(at, job) for at, job in started if str(job).startswith("a")]
    assert a_started == [(0, "a1"), (0, "a2"), (4, "a3"), (6, "a4"), (8, "a5"), (9, "a6")]
    stopped = [(e["at"], e["job"], e["reason"]) for e in events if e["type"] == "preempted"]
    assert stopped[0] == (8, "a3", Rule.PRIORITY)
    assert len(stopped) == 2 and stopped[1][0] == 9 and stopped[1][2] == "priority"
    # the enums stay inside: the output holds the plain strings it always held
    assert {type(e["type"]) for e in events} == {str}
    assert {type(e["reason"]) for e in events if "reason" in e} == {str}
