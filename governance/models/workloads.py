"""Workloads: a team's named, repeated kinds of work, with the interruption class their
jobs take and whether their recovery from a preemption has been shown to work
(docs/workloads.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from governance.models.teams import Team


class Interruption(models.TextChoices):
    TOLERANT = "tolerant", "Tolerant"
    PROTECTED = "protected", "Protected"


class RecoveryStatus(models.TextChoices):
    UNVERIFIED = "unverified", "Unverified"
    VERIFIED = "verified", "Verified"
    FAILED = "failed", "Failed"


class Workload(models.Model):
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="workloads")
    # "vision/detector-finetune": unique within the team.
    name = models.CharField(max_length=100)
    # tolerant: the job's own may_borrow/preemptible; protected: both false at submission.
    interruption = models.CharField(
        max_length=10, choices=Interruption.choices, default=Interruption.TOLERANT
    )
    # What state a resume needs and how output is validated (free text).
    recovery_assumptions = models.TextField(blank=True, default="")
    recovery_status = models.CharField(
        max_length=10, choices=RecoveryStatus.choices, default=RecoveryStatus.UNVERIFIED
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="workload_unique_name_in_team"),
        ]

    def __str__(self) -> str:
        return self.name


class RecoveryChange(models.Model):
    """One change of a workload's recovery status, with its evidence: the job whose
    resumed run verified it or showed it failed (null when a lead changed it by hand)."""

    workload = models.ForeignKey(
        Workload, on_delete=models.CASCADE, related_name="recovery_changes"
    )
    at = models.DateTimeField()
    before = models.CharField(max_length=10, choices=RecoveryStatus.choices)
    after = models.CharField(max_length=10, choices=RecoveryStatus.choices)
    evidence_job = models.ForeignKey(
        "governance.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True, default="")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["workload", "-at"])]

    def __str__(self) -> str:
        return f"{self.workload_id}: {self.before} -> {self.after} at {self.at}"
