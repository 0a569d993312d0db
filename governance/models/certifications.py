"""Certified configurations and preference templates (docs/workloads.md#certified-configurations):
a workload's configuration (a type and count, or a plan and count) with the benchmark of
its reference run, certified by a reviewer who did not propose it, and the workload's
ordered list of certified configurations its jobs take when they give no preferences."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from governance.models.capacity import InstanceType
from governance.models.plans import CapacityPlan
from governance.models.workloads import Workload

ConfigurationKey = tuple[str, str, int]


def key_text(key: ConfigurationKey) -> str:
    """A configuration in words: "ml.g5.48xlarge x4" or "plan vision-dec x2"."""
    kind, name, count = key
    return f"plan {name} x{count}" if kind == "plan" else f"{name} x{count}"


def preference_key(pref: Mapping[str, Any]) -> ConfigurationKey:
    """A job's resolved preference as a configuration key (``Certification.key``)."""
    if pref.get("plan"):
        return ("plan", str(pref["plan"]), int(pref.get("count") or 0))
    return ("type", str(pref.get("instance_type")), int(pref.get("count") or 0))


class CertificationState(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    CERTIFIED = "certified", "Certified"
    REJECTED = "rejected", "Rejected"
    REVOKED = "revoked", "Revoked"


class Certification(models.Model):
    """One configuration of a workload and its benchmark record. Expiry is a time, not a
    state: a certified configuration whose ``expires_at`` has passed is expired."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="certifications")
    # Exactly one of instance_type and plan.
    instance_type = models.ForeignKey(
        InstanceType, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    plan = models.ForeignKey(
        CapacityPlan, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    count = models.PositiveIntegerField()
    # The benchmark record of the workload's reference run on this configuration.
    runtime = models.PositiveIntegerField(help_text="seconds of the reference run")
    converged = models.BooleanField()
    utilization = models.DecimalField(max_digits=5, decimal_places=2)
    failure_rate = models.DecimalField(max_digits=5, decimal_places=2)
    output_valid = models.BooleanField()
    environment = models.CharField(max_length=300, blank=True, default="")
    notes = models.TextField(blank=True, default="")
    state = models.CharField(
        max_length=10, choices=CertificationState.choices, default=CertificationState.PROPOSED
    )
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    proposed_at = models.DateTimeField()
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.TextField(blank=True, default="")
    # When the team's leads were told it expires soon (once per certification).
    reminded_at = models.DateTimeField(null=True, blank=True)
    # Since when its runs drift from the benchmark (null: they do not); leads are told
    # once when it starts.
    drifting_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["workload_id", "-proposed_at", "-id"]
        indexes = [models.Index(fields=["workload", "state"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(instance_type__isnull=False, plan__isnull=True)
                | models.Q(instance_type__isnull=True, plan__isnull=False),
                name="certification_type_or_plan",
            ),
            models.CheckConstraint(
                condition=models.Q(count__gte=1), name="certification_count_gte_1"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.configuration} for {self.workload_id}"

    @property
    def key(self) -> ConfigurationKey:
        """The configuration as a job's preference names it: ("type", name, count) or
        ("plan", name, count)."""
        if self.plan is not None:
            return ("plan", self.plan.name, self.count)
        return ("type", self.instance_type.name if self.instance_type else "", self.count)

    @property
    def configuration(self) -> str:
        """As people read it: "ml.g5.48xlarge x4" or "plan vision-dec x2"."""
        return key_text(self.key)

    def in_force(self, now: datetime) -> bool:
        """Certified and not expired at ``now``: what templates and certified-only shares
        accept."""
        return self.state == CertificationState.CERTIFIED and (
            self.expires_at is None or self.expires_at > now
        )

    @property
    def status_now(self) -> str:
        """``status`` at this moment, for the pages."""
        return self.status(timezone.now())

    def status(self, now: datetime) -> str:
        """The state as people read it: ``expired`` for a certified one past its expiry."""
        if self.state == CertificationState.CERTIFIED and not self.in_force(now):
            return "expired"
        return str(self.state)


class PreferenceTemplate(models.Model):
    """A workload's template: its jobs that give no preferences take its entries in order,
    and these defaults when they give none of their own."""

    workload = models.OneToOneField(Workload, on_delete=models.CASCADE, related_name="template")
    max_pending = models.PositiveIntegerField(null=True, blank=True)
    # Seconds from submission.
    deadline_offset = models.PositiveIntegerField(null=True, blank=True)
    max_cost = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"template of workload {self.workload_id}"


class TemplateEntry(models.Model):
    """One place in a template: a certified configuration and why it stands there."""

    template = models.ForeignKey(
        PreferenceTemplate, on_delete=models.CASCADE, related_name="entries"
    )
    position = models.PositiveSmallIntegerField()
    certification = models.ForeignKey(Certification, on_delete=models.PROTECT, related_name="+")
    reason = models.CharField(max_length=500)

    class Meta:
        ordering = ["template_id", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["template", "position"], name="template_entry_unique_position"
            )
        ]

    def __str__(self) -> str:
        return f"{self.template_id}[{self.position}]"
