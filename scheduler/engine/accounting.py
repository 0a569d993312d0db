"""Entitlement accounting of docs/scheduling.md, written once.

The engine decides with these figures, and the pages and the API show them: both call
:func:`account_type`, so "who has the right" and "who uses it now" cannot drift apart
between what the scheduler does and what people are shown. Plain Python, no Django.

Per share ``S`` and type ``T``: ``own = min(usage, limit)``, ``borrowed = max(0, usage -
limit)``, ``idle = max(0, limit - usage)``; a type the share has no limit for counts as
limit 0. ``free(S,T)`` is what S may physically take: capacity minus total usage minus the
idle entitlement of RESERVE shares other than S. ``lent(S,T)`` is display only: the total
borrowed on T is set first against capacity no share owns, then laid on the idle
entitlement of lending shares (LEND, LEND_AND_BORROW) in the order given, each up to its
idle; :func:`lending` says which borrower holds which of it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

RESERVE = "RESERVE"
LENDING_POLICIES = frozenset({"LEND", "LEND_AND_BORROW"})


def own(limit: int, usage: int) -> int:
    return min(usage, limit)


def borrowed(limit: int, usage: int) -> int:
    return max(0, usage - limit)


def idle(limit: int, usage: int) -> int:
    return max(0, limit - usage)


def reserved_idle(policy: str, limit: int, usage: int) -> int:
    """Idle entitlement that nobody else may use: only a RESERVE share keeps its idle."""
    return idle(limit, usage) if policy == RESERVE else 0


def free(capacity: int, total_usage: int, reserved_by_others: int) -> int:
    """``free(S,T)`` given the RESERVE idle of the shares other than S."""
    return max(0, capacity - total_usage - reserved_by_others)


@dataclass(frozen=True, slots=True)
class ShareOnType(Generic[K]):
    """What the accounting needs of one share on one type. ``limit`` None: no limit."""

    key: K
    policy: str
    limit: int | None
    usage: int


@dataclass(frozen=True, slots=True)
class ShareAccount(Generic[K]):
    key: K
    has_limit: bool
    limit: int
    usage: int
    own: int
    borrowed: int
    idle: int
    lent: int
    free: int


@dataclass(frozen=True, slots=True)
class TypeAccount(Generic[K]):
    """One type of one queue: every share's figures and the queue's totals."""

    capacity: int
    limits: int
    usage: int
    borrowed: int
    unowned: int
    oversubscribed: bool
    shares: tuple[ShareAccount[K], ...]


UNOWNED = "unowned"
"""A source of borrowed instances: capacity no share's limit covers."""
LENDER = "lender"
"""A source of borrowed instances: a lending share's idle entitlement."""
BEYOND = "beyond"
"""Borrowed instances beyond every lendable source: they sit on a RESERVE share's idle
entitlement or on capacity that limits oversubscribe (after a policy, limit or capacity
change; the next cycles reclaim what the rules allow)."""


@dataclass(frozen=True, slots=True)
class Lending(Generic[K]):
    """``count`` borrowed instances of ``borrower`` attributed to one source: ``lender``
    (source LENDER), or capacity no share owns (UNOWNED), or none (BEYOND)."""

    borrower: K
    source: str
    lender: K | None
    count: int


def lending(capacity: int, shares: Sequence[ShareOnType[K]]) -> list[Lending[K]]:
    """Whose idle entitlement each borrower uses on one type (docs/ledger.md).

    Borrowed instances (``usage - limit`` beyond each share's limit) are laid, borrower
    after borrower in the order of ``shares``, first on capacity no share owns, then on
    the idle entitlement of the lending shares (LEND, LEND_AND_BORROW) in the order of
    ``shares``, each up to its idle, and what is left beyond them (BEYOND). Integer and
    deterministic; every borrowed instance is attributed exactly once, so the rows of a
    borrower add up to its borrowed count and a lender's rows to its ``lent``.
    """
    total_limits = sum(s.limit or 0 for s in shares if s.limit is not None)
    sources: list[tuple[str, K | None, int]] = [(UNOWNED, None, max(0, capacity - total_limits))]
    sources += [
        (LENDER, s.key, idle(s.limit or 0, s.usage))
        for s in shares
        if s.policy in LENDING_POLICIES and s.limit is not None and s.limit > s.usage
    ]
    out: list[Lending[K]] = []
    at = 0  # the source being filled, and what is left of it
    left = sources[0][2]
    for s in shares:
        need = borrowed(s.limit or 0, s.usage)
        while need > 0:
            while at < len(sources) and left == 0:
                at += 1
                left = sources[at][2] if at < len(sources) else 0
            if at == len(sources):
                out.append(Lending(s.key, BEYOND, None, need))
                break
            take = min(need, left)
            source, lender, _ = sources[at]
            out.append(Lending(s.key, source, lender, take))
            need -= take
            left -= take
    return out


def account_type(capacity: int, shares: Sequence[ShareOnType[K]]) -> TypeAccount[K]:
    """Accounting of one type; ``shares`` in the order lent capacity is attributed."""
    total_usage = sum(s.usage for s in shares)
    total_limits = sum(s.limit or 0 for s in shares if s.limit is not None)
    reserve_idle = sum(reserved_idle(s.policy, s.limit or 0, s.usage) for s in shares)
    total_borrowed = sum(borrowed(s.limit or 0, s.usage) for s in shares)
    lent_by: dict[K, int] = {}
    if total_borrowed:
        for row in lending(capacity, shares):
            if row.lender is not None:
                lent_by[row.lender] = lent_by.get(row.lender, 0) + row.count
    rows: list[ShareAccount[K]] = []
    for s in shares:
        limit = s.limit or 0
        lent = lent_by.get(s.key, 0)
        own_reserved = reserved_idle(s.policy, limit, s.usage)
        rows.append(
            ShareAccount(
                key=s.key,
                has_limit=s.limit is not None,
                limit=limit,
                usage=s.usage,
                own=own(limit, s.usage),
                borrowed=borrowed(limit, s.usage),
                idle=idle(limit, s.usage),
                lent=lent,
                free=free(capacity, total_usage, reserve_idle - own_reserved),
            )
        )
    return TypeAccount(
        capacity=capacity,
        limits=total_limits,
        usage=total_usage,
        borrowed=total_borrowed,
        unowned=max(0, capacity - total_limits),
        oversubscribed=total_limits > capacity or total_usage > capacity,
        shares=tuple(rows),
    )


def most_ever(policy: str, limit: int | None, borrow_limit: int | None, capacity: int) -> int:
    """The most instances of a type one job of a share could ever hold, as the share and
    the queue are configured (docs/scheduling.md), whatever else runs: at most the capacity;
    nothing without a limit for the type; beyond the limit only for LEND_AND_BORROW, up
    to ``floor(limit * pct / 100)`` more (any amount when -1). A job asking more on every
    preference waits forever unless an admin changes something."""
    if limit is None:
        return 0
    reach = limit
    if policy == "LEND_AND_BORROW":
        if borrow_limit == -1:
            reach = capacity
        elif borrow_limit is not None and borrow_limit > 0:
            reach = limit + limit * borrow_limit // 100
    return max(0, min(reach, capacity))


def borrow_percent_needed(limit: int, count: int) -> int | None:
    """The smallest borrow limit (percent) letting a LEND_AND_BORROW share with ``limit``
    hold ``count`` instances; None when only an unlimited one (-1) would (limit 0)."""
    if count <= limit:
        return 0
    if limit <= 0:
        return None
    # floor(limit * pct / 100) >= count - limit  <=>  limit * pct >= 100 * (count - limit)
    return -(-100 * (count - limit) // limit)
