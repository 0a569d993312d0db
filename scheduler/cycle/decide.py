"""The decide phase: the engine plays the snapshot's instant. Pure: it changes the
snapshot's engine and nothing stored (the apply phase writes the decisions)."""

from __future__ import annotations

from scheduler import engine as eng
from scheduler.cycle.snapshot import QueueSnapshot, to_ms


def play_instant(snapshot: QueueSnapshot, engine: eng.Engine | None = None) -> list[eng.Decision]:
    """The scheduling of the snapshot's instant on ``engine`` (the snapshot's by default):
    the stored capacity (drops stop jobs as capacity_lost), then the cycles to a fixpoint.

    Completions were found by the read phase; timeouts are ``decide``'s (a cycle applies
    them, a reading of the end of the instant does not need them).
    """
    engine = engine if engine is not None else snapshot.engine
    ms = to_ms(snapshot.now)
    decisions: list[eng.Decision] = []
    # Plan ends first (docs/scheduling.md#capacity-plans, order within an instant), then the stored
    # capacities and plan counts, then the cycles (which start the plans due).
    decisions += engine.advance_plans(ms)
    for name in sorted(snapshot.type_ids):
        decisions += engine.set_capacity(name, snapshot.capacity.get(name, 0), ms)
    for plan in snapshot.plans.values():
        decisions += engine.set_plan(plan.name, plan.count, ms)
    decisions += engine.schedule(ms)
    return decisions


def decide(snapshot: QueueSnapshot) -> list[eng.Decision]:
    """A cycle's decisions, in the engine's order: the instant played, then the
    timeouts due by its end."""
    decisions = play_instant(snapshot)
    decisions += snapshot.engine.timeouts(to_ms(snapshot.now))
    return decisions
