"""The demo: data worth looking at, and the weather that keeps it moving
(``manage.py load_demo``; ``./scripts/run`` starts it).

- ``world``: the queues, teams, users, shares, agreements, jobs and exceptions
  (``load``), and the queue on the local Slurm (``load_slurm``);
- ``certifications``: certified configurations and the runs that test them;
- ``history``: a few days of the fleet queue played through the engine;
- ``records``: a played history written as the live scheduler would have left it;
- ``activity``: the ticks of a busy cluster (beat's ``scheduler.tasks.demo_activity``).

The world's names are kept here, so ``from governance import demo`` then ``demo.load()``
reads as it always did.
"""

from governance.demo.world import (
    DEMO_ACTOR,
    DEMO_PLAN,
    FLEET_CAPACITY,
    LENDING_QUEUE,
    MARKER_QUEUE,
    SLURM_QUEUE,
    TEAMS,
    already_loaded,
    demo_actor,
    load,
    load_slurm,
)

__all__ = [
    "DEMO_ACTOR",
    "DEMO_PLAN",
    "FLEET_CAPACITY",
    "LENDING_QUEUE",
    "MARKER_QUEUE",
    "SLURM_QUEUE",
    "TEAMS",
    "already_loaded",
    "demo_actor",
    "load",
    "load_slurm",
]
