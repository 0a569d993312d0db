"""Priority definitions: what a band of priority values means org-wide, and who may use it."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

MIN_PRIORITY = 0
MAX_PRIORITY = 9999
NAME_MAX_LENGTH = 100


class BandRole(models.TextChoices):
    """Roles that may use a band without an approved exception."""

    MEMBER = "member", "Team member"
    LEAD = "lead", "Team lead"
    REVIEWER = "reviewer", "Reviewer"
    ADMIN = "admin", "Admin"


class PriorityDefinition(models.Model):
    name = models.CharField(max_length=NAME_MAX_LENGTH, unique=True)
    min_priority = models.PositiveIntegerField()
    max_priority = models.PositiveIntegerField()
    criteria = models.TextField(blank=True, default="")
    usable_by = ArrayField(models.CharField(max_length=16, choices=BandRole.choices), default=list)
    # Who owns (reviews) exceptions into this band; any reviewer or admin may still decide.
    exception_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["min_priority"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(min_priority__lte=models.F("max_priority")),
                name="priority_definition_min_lte_max",
            ),
            models.CheckConstraint(
                condition=models.Q(max_priority__lte=MAX_PRIORITY),
                name="priority_definition_max_lte_9999",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.min_priority}-{self.max_priority})"
