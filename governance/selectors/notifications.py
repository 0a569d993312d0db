"""Reads of a person's notifications."""

from __future__ import annotations

from django.db.models import QuerySet

from governance.models import Notification, NotificationPreference
from governance.roles import AnyUser


def notifications_of(user: AnyUser) -> QuerySet[Notification]:
    return Notification.objects.filter(recipient_id=user.pk).order_by("-created_at", "-id")


def unread_count(user: AnyUser) -> int:
    if not user.is_authenticated:
        return 0
    return Notification.objects.filter(recipient_id=user.pk, read_at__isnull=True).count()


def preference_of(user: AnyUser) -> NotificationPreference | None:
    if not user.is_authenticated:
        return None
    return NotificationPreference.objects.filter(user_id=user.pk).first()
