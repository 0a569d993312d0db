"""What people are told: in-app notifications, and how each person wants them delivered."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class NotificationKind(models.TextChoices):
    EXCEPTION_NEEDS_REVIEW = "exception_needs_review", "An exception needs review"
    EXCEPTION_DECIDED = "exception_decided", "An exception was decided"
    JOB_PREEMPTED = "job_preempted", "A job was preempted"
    JOB_FAILED = "job_failed", "A job failed"
    SHARE_CHANGED = "share_changed", "A share of your team changed"
    CHANGE_REQUEST_NEEDS_REVIEW = "change_request_review", "A share change request needs review"
    CHANGE_REQUEST_DECIDED = "change_request_decided", "A share change request was decided"
    AGREEMENT_REVIEW_DUE = "agreement_review_due", "An agreement reached its review date"
    AGREEMENT_EVIDENCE_MOVED = (
        "agreement_evidence_moved",
        "Evidence attached to your agreement was moved to another",
    )
    AGREEMENT_REVIEW_SOON = "agreement_review_soon", "An agreement's review date is near"
    PROMISE_BROKEN = "promise_broken", "A promise of an agreement was broken"
    SLURM_DRIFT = "slurm_drift", "Slurm runs a job beyond what the product admitted"
    RECOVERY_CHANGED = "recovery_changed", "A workload's recovery status changed"
    DECISION_OPENED = "decision_opened", "A job exhausted its retries: a decision is needed"
    DECISION_DUE_SOON = "decision_due_soon", "An open decision is due soon"
    DECISION_OVERDUE = "decision_overdue", "An open decision is overdue"
    CERTIFICATION_NEEDS_REVIEW = (
        "certification_review",
        "A configuration of a workload needs certifying",
    )
    CERTIFICATION_DECIDED = "certification_decided", "A configuration was certified or rejected"
    CERTIFICATION_EXPIRING = "certification_expiring", "A certified configuration expires soon"
    CERTIFICATION_DRIFT = "certification_drift", "A certified configuration's runs drift"


# By email unless the person says otherwise; job events are frequent, so in the app only.
EMAIL_BY_DEFAULT = (
    NotificationKind.EXCEPTION_NEEDS_REVIEW,
    NotificationKind.EXCEPTION_DECIDED,
    NotificationKind.SHARE_CHANGED,
    NotificationKind.AGREEMENT_REVIEW_DUE,
    NotificationKind.CHANGE_REQUEST_NEEDS_REVIEW,
    NotificationKind.CHANGE_REQUEST_DECIDED,
    NotificationKind.AGREEMENT_EVIDENCE_MOVED,
    NotificationKind.AGREEMENT_REVIEW_SOON,
    NotificationKind.PROMISE_BROKEN,
    NotificationKind.SLURM_DRIFT,
    NotificationKind.DECISION_OPENED,
    NotificationKind.DECISION_DUE_SOON,
    NotificationKind.DECISION_OVERDUE,
)


class Notification(models.Model):
    """One event told to one person. ``key`` names the event, so an event is told to a
    person once however often the code that tells it runs."""

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=32, choices=NotificationKind.choices)
    key = models.CharField(max_length=120)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True, default="")
    url = models.CharField(max_length=300, blank=True, default="")
    created_at = models.DateTimeField()
    read_at = models.DateTimeField(null=True, blank=True)
    # Delivery outside the app: when it was done, or null while due (or not wanted).
    email_due = models.BooleanField(default=False)
    emailed_at = models.DateTimeField(null=True, blank=True)
    webhook_due = models.BooleanField(default=False)
    webhook_sent_at = models.DateTimeField(null=True, blank=True)
    delivery_error = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["recipient", "key"], name="notification_once_per_recipient"
            )
        ]
        indexes = [
            models.Index(fields=["recipient", "read_at"], name="notification_unread"),
            models.Index(
                fields=["created_at"],
                condition=models.Q(email_due=True, emailed_at__isnull=True)
                | models.Q(webhook_due=True, webhook_sent_at__isnull=True),
                name="notification_undelivered",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.recipient_id}: {self.title}"


class NotificationPreference(models.Model):
    """How one person wants to be told, per kind: by email, by webhook (Slack-compatible
    JSON to ``webhook_url``); in the app always."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    email_kinds = models.JSONField(default=list, blank=True)
    webhook_kinds = models.JSONField(default=list, blank=True)
    webhook_url = models.URLField(max_length=300, blank=True, default="")

    def __str__(self) -> str:
        return f"preferences of {self.user_id}"
