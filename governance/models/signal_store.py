"""Stored signals answers (docs/signals.md#stored-answers): what a closed window's signals
were, with the marks that tell whether anything recorded since could change them."""

from __future__ import annotations

from django.db import models

from governance.models.capacity import JobQueue


class SignalAnswer(models.Model):
    """The signals answer of one queue, window ``[start, stop)`` and grouping, computed
    when the window had ended. ``last_event``, ``last_job`` and ``last_audit`` are the
    newest ids of those tables when it was computed: a newer row that falls before
    ``stop`` (a late executor report, a job or audit entry back-dated) makes it stale.
    ``shape`` is a digest of the queue's shares, teams and types (names and prices),
    which the answer names and prices by."""

    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="+")
    start = models.DateTimeField()
    stop = models.DateTimeField()
    group_by = models.CharField(max_length=8)
    last_event = models.BigIntegerField()
    last_job = models.BigIntegerField()
    last_audit = models.BigIntegerField()
    shape = models.CharField(max_length=64)
    answer = models.JSONField()
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "start", "stop", "group_by"], name="signal_answer_window"
            )
        ]

    def __str__(self) -> str:
        return f"signals of queue {self.queue_id} {self.start:%Y-%m-%d %H:%M}-{self.stop:%H:%M}"
