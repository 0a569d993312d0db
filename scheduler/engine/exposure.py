"""How exposed the runs on borrowed capacity are: who lent it, and who may want it back.

Plain Python, no Django. A share that holds more of a type than its limit borrows there
(``accounting.borrowed``), and every running job of that share on the type is open to
reclaim (docs/scheduling.md): an owner's job that fits within its own entitlement stops
such runs to get its capacity back. Whose capacity the borrowed instances are is the
accounting's attribution (``accounting.lending``, shares in name order, as the lending
ledger and the pages count ``lent``): capacity no share owns first, then the lenders'
idle entitlement.

For each exposed run this says which shares lent its share the capacity, what those
lenders wait for on the type (their pending jobs with a preference for it), and whether
a reclaim is **imminent**: some other share has a pending job whose preference for the
type fits within that share's idle entitlement but not in the capacity free to it, so
the cycle that places it takes capacity back from the borrowers. Otherwise the run
**may be reclaimed** whenever such work arrives. The readings add the engine's own
verdict for the cycle due now.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.engine import accounting
from scheduler.engine.facade import Engine
from scheduler.engine.model import Job, JobState
from scheduler.engine.preemption import victim_order


@dataclass(frozen=True, slots=True)
class Demand:
    """One share's pending work on a type: jobs with a preference for it, the instances
    those preferences ask, and how many of the jobs fit within its idle entitlement but
    not in the capacity free to it (so only a reclaim starts them)."""

    share: str
    jobs: int = 0
    instances: int = 0
    fitting: int = 0


@dataclass(frozen=True, slots=True)
class Lender:
    """A source of a borrowing share's instances on one type (``accounting.Lending``)
    with the lender's pending work there (None for capacity no share owns)."""

    source: str
    lender: str | None
    instances: int
    demand: Demand | None


@dataclass(frozen=True, slots=True)
class Exposure:
    """A running job whose share borrows on the job's type."""

    job: str
    share: str
    instance_type: str
    count: int
    share_borrowed: int
    """The share's instances beyond its limit on the type, all open to reclaim."""
    lenders: tuple[Lender, ...]
    wanted_back_by: tuple[str, ...]
    """Other shares with pending work that fits within their idle entitlement here."""

    @property
    def imminent(self) -> bool:
        return bool(self.wanted_back_by)


def _demand(share: str, pending: list[Job], instance_type: str, idle: int, free: int) -> Demand:
    jobs = instances = fitting = 0
    for job in pending:
        asks = [
            p.count for p in job.preferences if p.plan is None and p.instance_type == instance_type
        ]
        if not asks:
            continue
        jobs += 1
        instances += asks[0]
        # within its own idle entitlement, but more than is free: only a reclaim starts it
        fitting += any(free < n <= idle for n in asks)
    return Demand(share, jobs, instances, fitting)


def _usage(jobs: list[Job]) -> dict[str, int]:
    usage: dict[str, int] = {}
    for job in jobs:
        usage[job.share] = usage.get(job.share, 0) + job.count
    return usage


def _on_type(
    engine: Engine, type_name: str, usage: dict[str, int]
) -> list[accounting.ShareOnType[str]]:
    """Every share on the type, in name order (the order lent capacity is attributed)."""
    configs = engine.shares
    return [
        accounting.ShareOnType(
            key=name,
            policy=configs[name].policy.value,
            limit=configs[name].limits.get(type_name),
            usage=usage.get(name, 0),
        )
        for name in sorted(configs)
    ]


def _running_by_type(engine: Engine) -> dict[str, list[Job]]:
    running: dict[str, list[Job]] = {}
    for job in engine.jobs():
        if job.state is JobState.RUNNING and job.instance_type and job.plan is None:
            running.setdefault(job.instance_type, []).append(job)
    return running


@dataclass(frozen=True, slots=True)
class TypeLending:
    """Lending on one type now: the runs on it (not on a capacity plan), every share's
    usage there in name order, and whose capacity each borrowing share holds
    (``accounting.lending``: capacity no share owns first, then the lenders' idle
    entitlement). The one attribution the cycle's ``lent_by``, the exposures and the
    lending ledger read."""

    instance_type: str
    running: list[Job]
    shares: list[accounting.ShareOnType[str]]
    rows: list[accounting.Lending[str]]

    @property
    def borrowers(self) -> set[str]:
        """The shares holding more of the type than their limit."""
        return {row.borrower for row in self.rows}


def lending_by_type(engine: Engine) -> dict[str, TypeLending]:
    """Per type with borrowed instances (in name order), its ``TypeLending`` in the
    engine's state now."""
    out = {}
    for type_name, jobs_on in sorted(_running_by_type(engine).items()):
        shares = _on_type(engine, type_name, _usage(jobs_on))
        rows = accounting.lending(engine.instance_types[type_name].capacity, shares)
        if rows:
            out[type_name] = TypeLending(type_name, jobs_on, shares, rows)
    return out


def open_to_reclaim(engine: Engine, lending: TypeLending, ms: int) -> list[Job]:
    """The runs on ``lending``'s type whose share borrows there, in the engine's victim
    order at ``ms`` (the first is the first a reclaim would take)."""
    borrowers = lending.borrowers
    return victim_order(
        [job for job in lending.running if job.share in borrowers],
        lambda job: engine.lost_work_at(job, ms),
    )


def exposures(engine: Engine) -> dict[str, Exposure]:
    """Job id -> its exposure, for every running job (not on a capacity plan) whose share
    borrows on the job's type, in the engine's state now."""
    configs = engine.shares
    pending: dict[str, list[Job]] = {}
    for job in engine.pending_jobs():
        pending.setdefault(job.share, []).append(job)
    out: dict[str, Exposure] = {}
    for type_name, lending in lending_by_type(engine).items():
        jobs_on, rows = lending.running, lending.rows
        usage = {share.key: share.usage for share in lending.shares}
        capacity = engine.instance_types[type_name].capacity
        account = accounting.account_type(capacity, lending.shares)
        demand = {
            row.key: _demand(row.key, pending.get(row.key, []), type_name, row.idle, row.free)
            for row in account.shares
            if row.has_limit
        }
        for borrower in sorted({row.borrower for row in rows}):
            lenders = tuple(
                Lender(row.source, row.lender, row.count, demand.get(row.lender or ""))
                for row in rows
                if row.borrower == borrower
            )
            wanted = tuple(
                name for name, d in sorted(demand.items()) if name != borrower and d.fitting
            )
            limit = configs[borrower].limits.get(type_name, 0)
            for job in jobs_on:
                if job.share == borrower:
                    out[job.id] = Exposure(
                        job=job.id,
                        share=borrower,
                        instance_type=type_name,
                        count=job.count,
                        share_borrowed=accounting.borrowed(limit, usage[borrower]),
                        lenders=lenders,
                        wanted_back_by=wanted,
                    )
    return out


def lending_now(engine: Engine) -> dict[str, list[accounting.Lending[str]]]:
    """Per type with borrowed instances, whose capacity each borrowing share holds now
    (``lending_by_type``'s attribution): what a run admitted on borrowed capacity records
    as lent by."""
    return {type_name: found.rows for type_name, found in lending_by_type(engine).items()}
