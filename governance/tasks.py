"""Celery tasks of the governance app (the scheduler's live in ``scheduler.tasks``)."""

from __future__ import annotations

from datetime import UTC, datetime

from celery import shared_task
from django.utils import timezone

from governance.services import (
    audit,
    certifications,
    decisions,
    idempotency,
    notifications,
    promises,
)


@shared_task(ignore_result=True)
def deliver_notifications(ids: list[int]) -> int:
    """Email and webhook deliveries of notifications written by a committed change."""
    return notifications.deliver(ids)


@shared_task(ignore_result=True)
def notifications_sweep() -> int:
    """Beat: what a lost task left undelivered, agreements whose review date came, open
    decisions whose due time is near or came, and certifications that expire soon or whose
    runs started to drift."""
    notifications.agreements_due()
    decisions.decisions_remind()
    certifications.certifications_remind()
    certifications.certifications_drift_check()
    return notifications.deliver_due()


@shared_task(ignore_result=True)
def purge_idempotency_keys() -> int:
    """Beat's hourly clean-up: idempotency keys older than 24 h are no longer honoured."""
    return idempotency.idempotency_purge()


@shared_task(ignore_result=True)
def audit_checkpoint() -> bool:
    """Beat: sign each audit chain's head that moved with the audit key."""
    return bool(audit.checkpoint())


@shared_task(ignore_result=True)
def evaluate_promises() -> int:
    """Beat's daily pass: every promise in force, for its window ending at midnight UTC
    today (docs/agreements.md#promises)."""
    today = timezone.now().astimezone(UTC).date()
    stop = datetime(today.year, today.month, today.day, tzinfo=UTC)
    return len(promises.promises_evaluate(stop=stop))
