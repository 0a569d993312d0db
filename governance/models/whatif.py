"""What-if runs (docs/signals.md): a proposed configuration replayed against a queue's recorded
history, kept with its progress and result so it can be linked to and attached to an
allocation agreement as evidence."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from governance.models.agreements import Agreement
from governance.models.capacity import JobQueue


class WhatIfState(models.TextChoices):
    QUEUED = "QUEUED", "Queued"
    RUNNING = "RUNNING", "Running"
    DONE = "DONE", "Done"
    FAILED = "FAILED", "Failed"


class WhatIf(models.Model):
    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="whatifs")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    window_start = models.DateTimeField()
    window_stop = models.DateTimeField()
    # {"shares": {name: {scenario share fields}}, "capacity": {type: count}}
    proposal = models.JSONField(default=dict)
    state = models.CharField(max_length=8, choices=WhatIfState.choices, default=WhatIfState.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    step = models.CharField(max_length=200, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # Evidence: the agreement this result is attached to (by someone who may change it).
    agreement = models.ForeignKey(
        Agreement, null=True, blank=True, on_delete=models.SET_NULL, related_name="evidence"
    )
    attached_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"what-if {self.pk} on {self.queue_id}"
