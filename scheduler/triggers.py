"""Requests for scheduling cycles. Live scheduling (issue 4) fills this in."""

from __future__ import annotations


def request_cycle(queue_id: int) -> None:
    """Enqueue a cycle for ``queue_id``; a no-op until the Celery scheduler exists."""
    return None
