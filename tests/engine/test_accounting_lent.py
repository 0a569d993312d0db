"""Who lends what: the display-only attribution of borrowed capacity (engine accounting).

Moved from tests/services/test_capacity.py with the function it tested (the selectors'
``distribute_lent``, now part of ``scheduler.engine.accounting.account_type``).
"""

from scheduler.engine.accounting import ShareOnType, account_type


def _lent(capacity: int, borrower_usage: int) -> int:
    """A lender (limit 4, idle) and a RESERVE borrower (limit 4) on one type."""
    account = account_type(
        capacity,
        [
            ShareOnType(key=1, policy="LEND", limit=4, usage=0),
            ShareOnType(key=2, policy="RESERVE", limit=4, usage=borrower_usage),
        ],
    )
    return account.shares[0].lent


def test_unowned_capacity_absorbs_borrowing_first():
    assert _lent(capacity=10, borrower_usage=6) == 0  # 2 borrowed, 2 unowned
    assert _lent(capacity=9, borrower_usage=7) == 2  # 3 borrowed, 1 unowned


def test_lenders_lend_in_order_each_up_to_its_idle():
    account = account_type(
        4,
        [
            ShareOnType(key="a", policy="LEND_AND_BORROW", limit=1, usage=0),
            ShareOnType(key="b", policy="LEND", limit=2, usage=0),
            ShareOnType(key="c", policy="RESERVE", limit=1, usage=0),
            ShareOnType(key="x", policy="LEND", limit=None, usage=2),
        ],
    )
    lent = {row.key: row.lent for row in account.shares}
    assert lent == {"a": 1, "b": 1, "c": 0, "x": 0}
    free = {row.key: row.free for row in account.shares}
    # RESERVE c's idle 1 is kept from everyone but c itself.
    assert free == {"a": 1, "b": 1, "c": 2, "x": 1}
    assert account.oversubscribed is False and account.borrowed == 2
