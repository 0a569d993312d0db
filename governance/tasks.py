"""Celery tasks of the governance app: notifications leave the product from here."""

from __future__ import annotations

from celery import shared_task

from governance.services import notifications


@shared_task(ignore_result=True)
def deliver_notifications(ids: list[int]) -> int:
    """Email and webhook deliveries of notifications written by a committed change."""
    return notifications.deliver(ids)


@shared_task(ignore_result=True)
def notifications_sweep() -> int:
    """Beat: what a lost task left undelivered, and agreements whose review date came."""
    notifications.agreements_due()
    return notifications.deliver_due()
