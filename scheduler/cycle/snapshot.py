"""A queue as one cycle sees it: the public, typed value every phase and every executor
reads (``QueueSnapshot``), and the engine's unit of time.

Times: the engine counts in integer milliseconds of wall-clock time since the epoch, so
jobs submitted within one second still keep their order; work is in milliseconds of work
at speed 1.0 (docs/scheduling.md, "Work and lost work").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from django.db.models import DEFERRED

from governance.models import CapacityPlan, Job, JobQueue, JobState, Share
from governance.selectors.jobs import jobs_with_share
from scheduler import engine as eng

MS = 1000


def to_ms(moment: datetime) -> int:
    """A moment as the engine counts it (milliseconds since the epoch)."""
    return int(moment.timestamp() * MS)


def row_job(row: dict[str, Any]) -> Job:
    """A Job carrying the row's fields (for the progress arithmetic of runs), never saved.

    Built as Django builds a model from a query (every column by position, those the row
    lacks deferred: read from the database if ever asked for), which costs a quarter of
    a build by keywords: a cycle on the simulated fleet builds several per running job."""
    return Job(*[row.get(name, DEFERRED) for name in _attnames()])


@cache
def _attnames() -> tuple[str, ...]:
    return tuple(f.attname for f in Job._meta.concrete_fields)


class StaleRead(Exception):  # a condition the cycle handles, not an error
    """A job a kept engine decided about changed after the cycle read the queue: the
    cycle rolls its phases back and runs them again on a full read."""


class ActiveJobs:
    """The queue's active jobs: ``rows`` (every pending and running job as read, a dict
    of column values per job id as a string, the engine's key) and, on demand, their
    model instances, fetched only for the jobs decisions touch. A model reflects what the
    apply phase wrote; a row is the job as the cycle read it.

    A full read locks every row (``SELECT ... FOR UPDATE``). A cycle on a kept engine
    (``scheduler.cycle.kept``) locked only the rows it re-read: ``verify`` locks the
    others a decision touches before their models are fetched, and raises
    :class:`StaleRead` if one is no longer as read."""

    def __init__(
        self,
        rows: dict[str, dict[str, Any]],
        verify: Callable[[set[int]], None] | None = None,
    ) -> None:
        self.rows = rows
        self.verify = verify
        self._models: dict[str, Job] = {}

    def prefetch(self, keys: Iterable[str]) -> None:
        missing = {int(k) for k in keys if k in self.rows and k not in self._models}
        if missing:
            if self.verify is not None:
                self.verify(missing)
            for job in jobs_with_share(missing):
                self._models[str(job.pk)] = job

    def __getitem__(self, key: str) -> Job:
        if key not in self.rows:
            raise KeyError(key)
        if key not in self._models:
            self.prefetch([key])
        return self._models[key]

    def get(self, key: str) -> Job | None:
        return self[key] if key in self.rows else None

    def __contains__(self, key: object) -> bool:
        return key in self.rows


@dataclass
class QueueSnapshot:
    """One queue at ``now`` as the engine sees it, plus the id maps the apply phase and
    the executors need. Read by ``scheduler.cycle.read.load``; the engine in it is the
    one the decide phase plays."""

    queue: JobQueue
    engine: eng.Engine
    now: datetime
    jobs: ActiveJobs
    shares: dict[str, Share]
    """The queue's shares by name (the engine's share key)."""
    type_ids: dict[str, int]
    """Instance type name (the engine's key) -> its id: every type the engine knows."""
    speeds: dict[str, float]
    """Instance type name -> its speed (work per second)."""
    capacity: dict[str, int]
    """The stored capacity of each type the queue lists."""
    plans: dict[str, CapacityPlan] = field(default_factory=dict)
    """The queue's capacity plans the engine knows, by name (docs/scheduling.md#capacity-plans)."""
    disabled_pending: list[Job] = field(default_factory=list)
    """Pending jobs of disabled shares: not in the engine, nothing starts them (filled by
    a full read; a cycle on a kept engine, which never needs them, leaves it empty)."""
    completions: list[tuple[Job, datetime]] = field(default_factory=list)
    """Runs the executor finished by itself by ``now`` (the simulated fleet), with when:
    not in the engine; the cycle completes them first."""

    def speed_by_type_id(self) -> dict[int, float]:
        """Instance type id -> its speed."""
        return {self.type_ids[name]: speed for name, speed in self.speeds.items()}

    def running_after(self, decisions: Sequence[eng.Decision]) -> dict[int, int]:
        """The queue's running jobs once ``decisions`` are applied, in the order they
        started (then by id): job id -> its run."""
        touched = {d.job for d in decisions}
        running: list[tuple[Any, int, int]] = []
        for key, row in self.jobs.rows.items():
            if key in touched:
                job = self.jobs[key]  # as the decisions left it
                if job.state == JobState.RUNNING:
                    running.append((job.run_started_at, job.pk, job.run))
            elif row["state"] == JobState.RUNNING:
                running.append((row["run_started_at"], row["id"], row["run"]))
        running.sort(key=lambda item: (item[0] is None, item[0] or self.now, item[1]))
        return {job_id: run for _, job_id, run in running}
