"""Plain data the engine works on: instance types, shares, jobs, decisions, reasons.

Everything here is a small dataclass that can be built from database rows or from a
scenario file without any framework. Work is measured in "work units" (seconds of work
at speed 1.0); it is kept exact (``int`` or ``fractions.Fraction``) so that speeds such as
1.5 never produce rounding surprises in completion times or lost work.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from fractions import Fraction

Work = int | Fraction
"""Work units: exact, an ``int`` whenever the value is whole."""

UNLIMITED = -1
"""A borrow limit of -1 means the share may borrow without bound."""

_ACCELERATED_FAMILY = re.compile(r"^(?:ml\.)?(?:p|g|trn)[a-z]*\d")


def default_accelerated(name: str) -> bool:
    """The default of a type's ``accelerated`` flag, from its family (ml.p, ml.g, ml.trn:
    ``ml.p4d``, ``ml.g5``, ``ml.gr6``, ``ml.trn1``). Only a default: the stored flag (or
    a scenario's ``accelerated``) decides, wherever it is given."""
    return bool(_ACCELERATED_FAMILY.match(name))


def exact(value: float | int | Fraction) -> Work:
    """Convert a number to exact work: floats through their shortest decimal repr."""
    if isinstance(value, Fraction):
        frac = value
    elif isinstance(value, int):
        return value
    else:
        frac = Fraction(repr(float(value)))
    return frac.numerator if frac.denominator == 1 else frac


def plain(value: Work) -> int | float:
    """Exact work back to a JSON-friendly number (int when whole)."""
    if isinstance(value, int):
        return value
    if value.denominator == 1:
        return value.numerator
    return float(value)


class Policy(enum.StrEnum):
    """How a share treats idle entitlement (see docs/data-model.md)."""

    RESERVE = "RESERVE"
    LEND = "LEND"
    LEND_AND_BORROW = "LEND_AND_BORROW"


class JobState(enum.StrEnum):
    """Life cycle of a job. Only PENDING and RUNNING jobs take part in scheduling."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"


class DecisionKind(enum.StrEnum):
    """What a :class:`Decision` records; the value is its event's ``type`` in the
    simulator's output (docs/scenarios.md), so a member compares and serializes as that
    string."""

    ADMITTED = "admitted"
    PREEMPTED = "preempted"
    FAILED = "failed"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


class Rule(enum.StrEnum):
    """The rule behind a :class:`Decision` (``Decision.rule``, an event's ``reason``):
    own or borrow (admitted), reclaim, priority, capacity_lost or plan_ended
    (preempted), preemption_retries_exhausted (failed), max_pending or deadline
    (timed_out). Values are the strings the output and the audit entries carry."""

    OWN = "own"
    BORROW = "borrow"
    RECLAIM = "reclaim"
    PRIORITY = "priority"
    CAPACITY_LOST = "capacity_lost"
    PLAN_ENDED = "plan_ended"
    RETRIES_EXHAUSTED = "preemption_retries_exhausted"
    MAX_PENDING = "max_pending"
    DEADLINE = "deadline"


FINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED}
)


@dataclass(frozen=True, slots=True)
class InstanceType:
    """A machine configuration in one queue and how many of it the queue has now."""

    name: str
    capacity: int
    speed: float | int | Fraction = 1
    accelerated: bool | None = None
    """None means: judge from the family (ml.p, ml.g, ml.trn are accelerated)."""
    hourly_price: float = 0.0

    @property
    def is_accelerated(self) -> bool:
        return default_accelerated(self.name) if self.accelerated is None else self.accelerated


@dataclass(slots=True)
class ShareConfig:
    """A share's quota in one queue. ``limits`` maps instance type to entitlement."""

    name: str
    limits: dict[str, int]
    policy: Policy = Policy.RESERVE
    borrow_limit: int = UNLIMITED
    """Percent of each limit that may be borrowed on top; -1 is unlimited."""
    in_share_preemption: bool = False
    preemption_retries: int | None = None
    """Preemptions (lost capacity and plan ends excluded) a job survives; None is
    unlimited."""

    def __post_init__(self) -> None:
        self.policy = Policy(self.policy)  # accept plain strings from callers

    def borrow_cap(self, instance_type: str) -> int | None:
        """Instances the share may hold beyond its limit on a type; None = unlimited.

        Only LEND_AND_BORROW shares borrow; others get 0. The cap is
        ``floor(limit * pct / 100)``, so a limit of 0 lends nothing to borrow on
        unless the borrow limit is unlimited.
        """
        if self.policy is not Policy.LEND_AND_BORROW:
            return 0
        if self.borrow_limit == UNLIMITED:
            return None
        return self.limits.get(instance_type, 0) * self.borrow_limit // 100


PLAN_POOL_PREFIX = "\x00plan:"
"""Prefix of a plan's pool key: no instance type name starts with a NUL character, so a
plan's pool and a type's pool never share a key in the engine's indices."""


def plan_pool(name: str) -> str:
    """The pool key of plan ``name`` (an instance type's pool key is its name)."""
    return PLAN_POOL_PREFIX + name


@dataclass(frozen=True, slots=True)
class Preference:
    """One option of a job's ordered preference list: ``count`` instances of a type, or,
    when ``plan`` is given, of that capacity plan (docs/scheduling.md#capacity-plans), in which case
    ``instance_type`` is the plan's type.

    ``pool`` is where the option runs: the type's name, or the plan's pool key. It is a
    field (computed once) rather than a property because the cycle reads it per job.
    """

    instance_type: str
    count: int
    plan: str | None = None
    runtime: int | None = None
    """Expected run time of the job on this option (time units), e.g. from a benchmark:
    what the deadline and the budget judge it by when the job has no ``duration``."""
    pool: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        key = self.instance_type if self.plan is None else plan_pool(self.plan)
        object.__setattr__(self, "pool", key)


@dataclass(frozen=True, slots=True)
class Plan:
    """A capacity plan (docs/scheduling.md#capacity-plans): ``count`` instances of ``instance_type``
    bought for ``share`` during ``[start, end)``, in addition to the queue's capacity.
    Only training jobs of ``share`` that name it run on it; it is never lent."""

    name: str
    instance_type: str
    count: int
    share: str
    start: int
    end: int
    hourly_price: float = 0.0

    @property
    def pool(self) -> str:
        return plan_pool(self.name)

    def active_at(self, now: int) -> bool:
        return self.start <= now < self.end


TRAINING = "training"
PROCESSING = "processing"
JOB_KINDS = (TRAINING, PROCESSING)
"""A job's kind: only training jobs may name a plan; it has no other effect."""


@dataclass(slots=True, eq=False)
class Job:
    """A job and its progress.

    The first block is what the user submitted; the second is scheduling state the
    engine maintains, but which a live bridge may also set when rebuilding state from
    the database (for a RUNNING job: ``instance_type``, ``count``, ``preference``,
    ``borrowed`` is recomputed, ``run_started_at``, ``work_done`` as of ``progress_at``
    and ``last_checkpoint``).
    """

    id: str
    share: str
    priority: int
    submitted_at: int
    preferences: tuple[Preference, ...]
    max_pending: int | None = None
    checkpoint_interval: Work | None = None
    restart_overhead: int = 0
    duration: Work | None = None
    """Total work; only the simulator needs it (to know when the job completes)."""
    kind: str = TRAINING
    """``training`` or ``processing``: only training jobs may name a plan."""
    order: int | None = None
    """The caller's order of jobs (file order in the simulator) where docs/scheduling.md says "in
    file order" (jobs preempted at a plan's end); None falls back to ``seq``."""
    may_borrow: bool = True
    """False: the job never borrows; for it, its share counts as one that cannot."""
    preemptible: bool = True
    """False: never an in-share (``priority``) victim; reclaim, lost capacity and plan
    ends still stop it."""
    deadline: int | None = None
    """A preference whose expected end passes it is not eligible (deadline_unreachable)."""
    max_cost: Work | None = None
    """A preference whose expected cost exceeds it is not eligible (over_budget)."""

    state: JobState = JobState.PENDING
    instance_type: str | None = None
    """Type of the current run (RUNNING), else of the last run."""
    plan: str | None = None
    """Plan of the current run (RUNNING), else of the last run; None: on-demand."""
    count: int = 0
    preference: int | None = None
    """Index of the preference last placed."""
    borrowed: int = 0
    started_at: int | None = None
    """First start ever (for wait and max pending time)."""
    run_started_at: int | None = None
    run_overhead: int = 0
    """Restart preparation of the current run: no work is done during it."""
    work_done: Work = 0
    """Work done as of ``progress_at`` (while running) or kept from the last checkpoint."""
    progress_at: int | None = None
    last_checkpoint: Work = 0
    preemptions: int = 0
    """Every preemption, lost capacity included."""
    counted_preemptions: int = 0
    """Preemptions counted against the share's retry limit (lost capacity excluded)."""
    recomputed: Work = 0
    """Total work lost to preemptions, to be done again."""
    finished_at: int | None = None
    seq: int = field(default=0)
    """Submission sequence (file order in the simulator), used for stable tie-breaks."""
    blocked: int = 0
    """Bit ``i`` set: preference ``i`` is not eligible at the engine's instant (kept by
    the engine while the job is pending, :mod:`scheduler.engine.constraints`)."""
    over_budget: int = 0
    """Bit ``i`` set: preference ``i`` is over the job's budget (fixed while pending)."""
    last_eligible: tuple[int | None, ...] = ()
    """Per preference, the last instant its expected end meets the deadline (None: no
    such bound); empty: the job has no deadline (fixed while pending)."""
    timeout_at: int | None = None
    """While pending: the first instant every preference is ineligible with one at
    least past the deadline (the job times out there); None: never."""


@dataclass(frozen=True, slots=True)
class Decision:
    """Something the engine decided or recorded; the simulator prints it as an event.

    ``kind`` is a :class:`DecisionKind`; ``rule`` a :class:`Rule` (a caller outside the
    engine may record a rule of its own, such as an executor's lost run). ``by`` is the
    preempting job (None for lost capacity). ``borrowed`` is how many of the job's
    instances lie beyond its limit.
    """

    kind: DecisionKind
    job: str
    at: int
    instance_type: str | None = None
    count: int | None = None
    preference: int | None = None
    borrowed: int | None = None
    rule: str | None = None
    by: str | None = None
    lost_work: Work | None = None
    plan: str | None = None
    """The plan of the run admitted or preempted (None: on-demand capacity)."""

    def to_event(self) -> dict[str, object]:
        """The JSON event of docs/scenarios.md (an admission's rule is implied by
        ``borrowed``: own when 0, borrow otherwise); a run on a plan carries ``plan``."""
        # plain strings, as before the enums: the output is the same object for object
        event: dict[str, object] = {"at": self.at, "type": str(self.kind), "job": self.job}
        if self.plan is not None and self.kind in (DecisionKind.ADMITTED, DecisionKind.PREEMPTED):
            event["plan"] = self.plan
        if self.kind == DecisionKind.ADMITTED:
            event.update(
                instance_type=self.instance_type,
                count=self.count,
                preference=self.preference,
                borrowed=self.borrowed,
            )
        elif self.kind == DecisionKind.PREEMPTED:
            event.update(
                instance_type=self.instance_type,
                count=self.count,
                reason=_plain(self.rule),
                by=self.by,
                lost_work=plain(self.lost_work if self.lost_work is not None else 0),
            )
        elif self.kind in (DecisionKind.FAILED, DecisionKind.TIMED_OUT):
            event["reason"] = _plain(self.rule)
        return event


def _plain(rule: str | None) -> str | None:
    """A rule as the plain string it stands for (None stays None)."""
    return None if rule is None else str(rule)


@dataclass(frozen=True, slots=True)
class Reason:
    """Why one preference of a pending job does not run
    (docs/scheduling.md#why-is-my-job-waiting)."""

    preference: int
    reason: str
    message: str

    def to_json(self) -> dict[str, object]:
        return {"preference": self.preference, "reason": self.reason, "message": self.message}


PLAN_REASON_CODES = ("plan_not_active", "plan_too_small", "plan_full")
"""Reasons of a plan preference (docs/scheduling.md#capacity-plans); the other reason codes never
apply to it."""

ELIGIBILITY_REASON_CODES = ("over_budget", "deadline_unreachable")
"""Reasons of a preference that is not eligible (its budget or the job's deadline rule it
out); they come before every other code, plan codes included."""

REASON_CODES = (
    *ELIGIBILITY_REASON_CODES,
    *PLAN_REASON_CODES,
    "no_limit_for_type",
    "capacity_unavailable",
    "no_preemptible_victims",
    "own_quota_full",
    "borrow_limit_reached",
    "no_lendable_capacity",
)
