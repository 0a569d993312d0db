"""What services call after a change that can alter a scheduling decision.

The live scheduler (scheduler.tasks) asks for a cycle of the queue once the transaction
commits, so a rolled-back change never triggers one and the cycle sees the committed state.
"""

from __future__ import annotations

from django.db import transaction


def queue_changed(queue_id: int) -> None:
    """Ask for a scheduling cycle of ``queue_id`` after the current transaction commits."""

    def _request() -> None:
        from scheduler import triggers

        triggers.request_cycle(queue_id)

    transaction.on_commit(_request)
