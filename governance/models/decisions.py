"""Decisions: a job failed by its share's preemption retry limit asks its team's leads
to decide what happens to the work (docs/workloads.md#decisions)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class DecisionState(models.TextChoices):
    OPEN = "open", "Open"
    RESUBMITTED = "resubmitted", "Resubmitted"
    RECLASSIFIED = "reclassified", "Reclassified"
    CLOSED = "closed", "Closed"


class Decision(models.Model):
    """One job's retry exhaustion, waiting for (or carrying) its team's leads' answer."""

    # The failed job; one decision per job.
    job = models.OneToOneField("governance.Job", on_delete=models.CASCADE, related_name="decision")
    team = models.ForeignKey("governance.Team", on_delete=models.PROTECT, related_name="decisions")
    state = models.CharField(
        max_length=12, choices=DecisionState.choices, default=DecisionState.OPEN
    )
    opened_at = models.DateTimeField()
    due_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Why (required to close; optional otherwise).
    note = models.TextField(blank=True, default="")
    # resubmitted: the copy that carries the work on.
    resubmitted_job = models.OneToOneField(
        "governance.Job",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="resubmitted_for",
    )
    # Reminders told (once each): before the due time, and at it.
    reminded_soon_at = models.DateTimeField(null=True, blank=True)
    reminded_due_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        indexes = [
            models.Index(fields=["state", "due_at"]),
            models.Index(fields=["team", "state"]),
        ]

    def __str__(self) -> str:
        return f"decision {self.pk} on job {self.job_id}"
