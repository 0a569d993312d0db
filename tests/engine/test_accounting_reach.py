"""``most_ever`` and ``borrow_percent_needed``: whether a job can ever start as a share and
its queue are configured (issue 13: "Why it waits" told leads to wait for jobs that never
could). Plain arithmetic, no database."""

from __future__ import annotations

import pytest

from scheduler.engine.accounting import borrow_percent_needed, most_ever


@pytest.mark.parametrize(
    ("policy", "limit", "borrow", "capacity", "most"),
    [
        ("RESERVE", 2, None, 8, 2),  # cannot borrow: its limit
        ("LEND", 2, None, 8, 2),
        ("LEND_AND_BORROW", 2, 0, 8, 2),  # 0% on top
        ("LEND_AND_BORROW", 2, 50, 8, 3),  # floor(2 * 50 / 100) = 1 more
        ("LEND_AND_BORROW", 3, 50, 8, 4),  # floor(1.5) = 1
        ("LEND_AND_BORROW", 2, 200, 8, 6),
        ("LEND_AND_BORROW", 2, 1000, 8, 8),  # never beyond the capacity
        ("LEND_AND_BORROW", 0, -1, 8, 8),  # borrow-only, unlimited
        ("LEND_AND_BORROW", 0, 500, 8, 0),  # limit 0 borrows only when unlimited
        ("RESERVE", 10, None, 4, 4),  # a limit above the capacity
        ("LEND_AND_BORROW", None, -1, 8, 0),  # no limit for the type: never
    ],
)
def test_most_ever(policy: str, limit: int | None, borrow: int | None, capacity: int, most: int):
    assert most_ever(policy, limit, borrow, capacity) == most


@pytest.mark.parametrize(
    ("limit", "count", "percent"),
    [(2, 2, 0), (2, 3, 50), (3, 4, 34), (3, 5, 67), (1, 4, 300), (0, 1, None)],
)
def test_borrow_percent_needed_is_the_smallest_that_fits(limit: int, count: int, percent):
    assert borrow_percent_needed(limit, count) == percent
    if percent is not None:
        assert most_ever("LEND_AND_BORROW", limit, percent, 100) >= count
        if percent > 0:
            assert most_ever("LEND_AND_BORROW", limit, percent - 1, 100) < count
