"""Upper bounds of every number a user can give, checked before anything is written.

Each bound is what the quantity can sensibly be, and never more than its database column
holds, so an absurd value is a 400 naming the field, not a server error or a job that
waits forever.
"""

from __future__ import annotations

from typing import Any

from governance.services.errors import Errors

# PostgreSQL ``integer`` (Django's IntegerField and PositiveIntegerField).
DB_INT_MAX = 2**31 - 1
# PostgreSQL ``bigint``: every primary key.
DB_BIGINT_MAX = 2**63 - 1
# Instances of one type a queue can hold, and so the largest count any share limit,
# borrow limit or job preference can ask for: a count above every possible capacity
# could never be placed.
MAX_INSTANCES = 100_000
# A borrow limit, in percent of each limit (10,000: up to a hundred times the limit).
MAX_BORROW_PERCENT = 10_000
# An instance type's speed relative to the reference type (1.0).
MAX_SPEED = 1000.0
# Accelerators on one instance.
MAX_ACCELERATORS = 1024
# Times in seconds (durations, checkpoint intervals, pending times): up to the column.
MAX_SECONDS = DB_INT_MAX
# Retries a share allows before a preempted job fails.
MAX_RETRIES = 10_000
# Versions of an optimistic-locking counter.
MAX_VERSION = DB_INT_MAX
# A reason or note kept in the audit trail.
MAX_REASON = 2000
# A queue's or team's description.
MAX_DESCRIPTION = 2000
# A password typed to sign in or set: hashing a longer one is only work for an attacker.
MAX_PASSWORD_LENGTH = 4096


def column_length(model: Any, field: str) -> int:
    """The length a text column holds: a form's or serializer's ``max_length`` reads it
    here rather than writing the number a second time."""
    length = model._meta.get_field(field).max_length
    assert isinstance(length, int), f"{model.__name__}.{field} has no max_length"
    return length


def is_int(value: Any) -> bool:
    """A JSON integer (``True`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(
    errors: Errors,
    field: str,
    value: Any,
    *,
    minimum: int,
    maximum: int,
    nullable: bool = False,
    label: str | None = None,
) -> bool:
    """Add an error for ``field`` unless ``value`` is an integer within bounds (or null
    when ``nullable``); True when it is valid."""
    if value is None and nullable:
        return True
    if is_int(value) and minimum <= value <= maximum:
        return True
    # In words, never the field's code name: "The count must be ..." (``label`` names it
    # when its key does not read as words).
    name = label or f"the {field.replace('_', ' ')}"
    empty = "empty or " if nullable else ""
    errors.add(
        field,
        f"{name[0].upper()}{name[1:]} must be {empty}a whole number from {minimum} to {maximum}.",
    )
    return False


def valid_id(value: Any) -> bool:
    """An integer that can name a row (a primary key); anything else names nothing."""
    return is_int(value) and 1 <= value <= DB_BIGINT_MAX
