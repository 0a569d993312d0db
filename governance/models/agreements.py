"""Allocation agreements: the written, versioned record behind a share's settings."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models

from governance.models.shares import Share


class Agreement(models.Model):
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True, default="")
    shares = models.ManyToManyField(Share, blank=True, related_name="agreements")
    reclaim_assumptions = models.TextField(blank=True, default="")
    recovery_assumptions = models.TextField(blank=True, default="")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agreements_owned"
    )
    # Besides the owner and admins, these users may change the agreement.
    editors = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="agreements_editable"
    )
    review_by = models.DateField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    # Maintained by the agreement service on every write (title weighted above the rest).
    search_vector = SearchVectorField(null=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["title"]
        indexes = [GinIndex(fields=["search_vector"], name="agreement_search_gin")]

    def __str__(self) -> str:
        return self.title


class AgreementVersion(models.Model):
    """A snapshot of an agreement as it was before an edit (and as first created)."""

    agreement = models.ForeignKey(Agreement, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True, default="")
    reclaim_assumptions = models.TextField(blank=True, default="")
    recovery_assumptions = models.TextField(blank=True, default="")
    review_by = models.DateField(null=True, blank=True)
    share_ids = models.JSONField(default=list)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    edited_at = models.DateTimeField()
    reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["agreement", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["agreement", "version"], name="agreement_version_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.title} v{self.version}"
