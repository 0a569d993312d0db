"""Measurements kept to answer "does sharing work": first start forecasts and usage
rollups. Neither is a governance decision (nothing here changes who may run what), so
they are written without audit entries: a forecast by the read that first makes it, a
rollup by the scheduling cycle.
"""

from __future__ import annotations

from django.db import models

from governance.models.capacity import InstanceType, JobQueue
from governance.models.jobs import Job
from governance.models.shares import Share


class JobForecast(models.Model):
    """The first estimate a pending job got of its start. Compared with the job's actual
    first start (``Job.started_at``) it gives the forecast error."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True)
    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="+")
    share = models.ForeignKey(Share, on_delete=models.CASCADE, related_name="+")
    estimated_at = models.DateTimeField()
    estimated_start = models.DateTimeField()
    position = models.PositiveIntegerField()
    basis = models.CharField(max_length=300)

    class Meta:
        indexes = [models.Index(fields=["queue", "estimated_at"])]

    def __str__(self) -> str:
        return f"{self.job_id} expected at {self.estimated_start}"


class UsageRollup(models.Model):
    """Instance-seconds a share spent own, borrowed, lent and idle on one type during one
    bucket, as the accounting function counts them (``scheduler.engine.accounting``).
    Written by the cycle, added to in place. Each chart reads one width, with about 100
    buckets per series: minutes for the last hour, quarter hours for the last day, six
    hours for the last 30 days (and beyond: those are kept)."""

    MINUTE = 60
    QUARTER = 900
    SIX_HOURS = 21600

    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="+")
    share = models.ForeignKey(Share, on_delete=models.CASCADE, related_name="+")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="+")
    width = models.PositiveIntegerField()
    start = models.DateTimeField()
    own = models.FloatField(default=0)
    borrowed = models.FloatField(default=0)
    lent = models.FloatField(default=0)
    idle = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["share", "instance_type", "width", "start"], name="usage_rollup_bucket"
            )
        ]
        indexes = [
            models.Index(fields=["queue", "width", "start"], name="usage_rollup_queue"),
            # The overview sums every queue's rollups of one window.
            models.Index(fields=["width", "start"], name="usage_rollup_window"),
        ]

    def __str__(self) -> str:
        return f"{self.share_id}/{self.instance_type_id} {self.width}s at {self.start}"


class UsageLevel(models.Model):
    """What the last cycle of a queue left running, per share and type, and when: the
    next cycle adds these levels times the time since to the rollups. Cycles within one
    minute add to ``pending`` instead; the first cycle of the next minute writes it to
    the rollups in one statement (so a queue cycled every few seconds writes rollups once
    a minute)."""

    queue = models.OneToOneField(JobQueue, on_delete=models.CASCADE, primary_key=True)
    since = models.DateTimeField()
    # [[share_id, instance_type_id, own, borrowed, lent, idle], ...]
    levels = models.JSONField(default=list)
    # [[share_id, instance_type_id, width, bucket start (epoch s), own, borrowed, lent,
    #   idle], ...]: instance-seconds not yet in the rollups.
    pending = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"levels of {self.queue_id} since {self.since}"
