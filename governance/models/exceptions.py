"""Priority exceptions: a time-boxed, reviewed permission to run above one's band."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from governance.models.jobs import Job
from governance.models.shares import Share
from governance.models.teams import Team

MAX_EXCEPTION_DAYS = 30


class ExceptionState(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn"
    EXPIRED = "expired", "Expired"
    # A pending job exception whose job ended before anyone decided it: nothing is left
    # to raise, so it is closed by the system, neither approved nor rejected.
    CLOSED = "closed", "Closed: job ended"


class PriorityException(models.Model):
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="exceptions_requested"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="exceptions")
    # Exactly one target: one job, or every job of a share.
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="exceptions"
    )
    share = models.ForeignKey(
        Share, null=True, blank=True, on_delete=models.CASCADE, related_name="exceptions"
    )
    priority = models.PositiveIntegerField()
    justification = models.TextField()
    wanted_by = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    state = models.CharField(
        max_length=10, choices=ExceptionState.choices, default=ExceptionState.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="exceptions_decided",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, default="")
    # For a job target: the priority the job had before approval, restored at expiry.
    previous_priority = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(job__isnull=False, share__isnull=True)
                    | models.Q(job__isnull=True, share__isnull=False)
                ),
                name="exception_exactly_one_target",
            ),
        ]
        indexes = [models.Index(fields=["state", "expires_at"])]

    def __str__(self) -> str:
        target = f"job {self.job_id}" if self.job_id else f"share {self.share_id}"
        return f"exception {self.pk}: {target} -> {self.priority} ({self.state})"
