"""Quota shares: a team's entitlement inside one queue, and its sharing policy."""

from __future__ import annotations

from django.db import models

from governance.models.capacity import InstanceType, JobQueue
from governance.models.teams import Team

MAX_SHARES_PER_QUEUE = 20
MAX_LIMITS_PER_SHARE = 5


class Policy(models.TextChoices):
    RESERVE = "RESERVE", "Reserve idle capacity"
    LEND = "LEND", "Lend idle capacity"
    LEND_AND_BORROW = "LEND_AND_BORROW", "Lend and borrow"


class Share(models.Model):
    queue = models.ForeignKey(JobQueue, on_delete=models.PROTECT, related_name="shares")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="shares")
    name = models.CharField(max_length=100)
    policy = models.CharField(max_length=16, choices=Policy.choices, default=Policy.RESERVE)
    # Percent of each own limit that may be borrowed on top; -1 unlimited; null unless
    # the policy is LEND_AND_BORROW (the rule lives in the share service).
    borrow_limit = models.IntegerField(null=True, blank=True)
    in_share_preemption = models.BooleanField(default=False)
    # Null means unlimited retries; 0 fails a job at its first preemption.
    preemption_retries = models.PositiveIntegerField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    # Jobs of workloads whose recovery is not verified (or naming none) may not borrow.
    borrow_requires_verified_recovery = models.BooleanField(default=False)
    # Its jobs name a workload and every preference is a certified, unexpired
    # configuration of it (docs/workloads.md#certified-only-shares).
    certified_only = models.BooleanField(default=False)
    # Optimistic locking: every edit must name the version it read.
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["queue__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "name"], name="share_unique_name_in_queue"),
        ]

    def __str__(self) -> str:
        return f"{self.queue.name}/{self.name}"


class ShareLimit(models.Model):
    share = models.ForeignKey(Share, on_delete=models.CASCADE, related_name="limits")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    count = models.PositiveIntegerField()

    class Meta:
        ordering = ["share", "instance_type__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["share", "instance_type"], name="share_limit_unique_type"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.share}: {self.count} x {self.instance_type}"
