"""Allocation agreements: the written, versioned record behind a share's settings."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models

from governance.models.capacity import JobQueue
from governance.models.shares import Share
from governance.models.teams import Team


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
    # The promises this version held (``services.promises.promise_snapshot`` each).
    promises = models.JSONField(default=list)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    edited_at = models.DateTimeField()
    reason = models.TextField(blank=True, default="")
    # A recorded review (its note in ``reason``), which makes a version even unchanged.
    review = models.BooleanField(default=False)

    class Meta:
        ordering = ["agreement", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["agreement", "version"], name="agreement_version_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.title} v{self.version}"


class PromiseState(models.TextChoices):
    KEPT = "kept", "Kept"
    BROKEN = "broken", "Broken"
    NO_DATA = "no_data", "No data"


class Promise(models.Model):
    """A promise of an agreement (docs/agreements.md): a signal of one share or team on
    one queue, compared with a threshold over a window of ``window_days`` days.

    Promises are part of the agreement's versions: a promise is added by the version
    ``added_in_version`` and withdrawn by ``removed_in_version`` (null while it holds);
    its evaluations stay with it either way. ``state``/``value`` are the latest
    evaluation's (blank before the first)."""

    agreement = models.ForeignKey(Agreement, on_delete=models.CASCADE, related_name="promises")
    figure = models.CharField(max_length=100)
    share = models.ForeignKey(
        Share, null=True, blank=True, on_delete=models.CASCADE, related_name="promises"
    )
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="promises"
    )
    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="promises")
    comparison = models.CharField(max_length=2)
    threshold = models.FloatField()
    window_days = models.PositiveSmallIntegerField()
    added_in_version = models.PositiveIntegerField()
    removed_in_version = models.PositiveIntegerField(null=True, blank=True)
    state = models.CharField(max_length=8, choices=PromiseState.choices, blank=True, default="")
    value = models.FloatField(null=True, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_stop = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agreement", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(share__isnull=False, team__isnull=True)
                | models.Q(share__isnull=True, team__isnull=False),
                name="promise_share_or_team",
            ),
        ]
        indexes = [
            models.Index(
                fields=["state"],
                condition=models.Q(removed_in_version__isnull=True),
                name="promise_active_state",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.figure} {self.comparison} {self.threshold:g}"


class PromiseEvaluation(models.Model):
    """One evaluation of a promise: its window, the figure's value and the verdict."""

    promise = models.ForeignKey(Promise, on_delete=models.CASCADE, related_name="evaluations")
    window_start = models.DateTimeField()
    window_stop = models.DateTimeField()
    value = models.FloatField(null=True, blank=True)
    state = models.CharField(max_length=8, choices=PromiseState.choices)
    evaluated_at = models.DateTimeField()

    class Meta:
        ordering = ["promise", "window_stop", "id"]
        indexes = [
            models.Index(fields=["promise", "window_stop"], name="promise_evaluation_window"),
        ]

    def __str__(self) -> str:
        return f"promise {self.promise_id} {self.state} at {self.window_stop}"
