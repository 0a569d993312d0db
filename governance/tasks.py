"""Celery tasks of the governance app (the scheduler's live in ``scheduler.tasks``)."""

from __future__ import annotations

from celery import shared_task

from governance.services import idempotency


@shared_task(ignore_result=True)
def purge_idempotency_keys() -> int:
    """Beat's hourly clean-up: idempotency keys older than 24 h are no longer honoured."""
    return idempotency.idempotency_purge()
