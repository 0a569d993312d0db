"""Capacity plans: instances of one type bought ahead for one share of one queue, for a
period (docs/scheduling.md#capacity-plans).

A plan's instances come on top of the queue's capacity of that type; only training jobs
of the plan's share whose preference names the plan run on them, and only while the plan
is active (``start <= now < end``). Plans are never deleted: jobs name them, and their
history (usage, cost) stays readable. Ending a plan early moves its ``end`` to the moment
an admin ended it and records that moment in ``ended_at``.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models

from governance.models.capacity import InstanceType, JobQueue
from governance.models.shares import Share


class PlanState(models.TextChoices):
    UPCOMING = "upcoming", "Upcoming"
    ACTIVE = "active", "Active"
    ENDED = "ended", "Ended"


class CapacityPlan(models.Model):
    queue = models.ForeignKey(JobQueue, on_delete=models.PROTECT, related_name="plans")
    share = models.ForeignKey(Share, on_delete=models.PROTECT, related_name="plans")
    name = models.CharField(max_length=100)
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    count = models.PositiveIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    # Price of one instance for one hour; a plan costs count x its whole active time x
    # this, used or not (docs/scheduling.md#capacity-plans, "Signals").
    hourly_price = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    # When an admin ended the plan before its planned end (its ``end`` is then this).
    ended_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["queue__name", "start", "name"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "name"], name="plan_unique_name_in_queue"),
            models.CheckConstraint(
                condition=models.Q(end__gt=models.F("start")), name="plan_end_after_start"
            ),
            models.CheckConstraint(
                condition=models.Q(hourly_price__gte=0), name="plan_price_gte_0"
            ),
        ]
        indexes = [models.Index(fields=["queue", "end"]), models.Index(fields=["share", "end"])]

    def __str__(self) -> str:
        return f"{self.queue.name}/{self.name}"

    def state_at(self, now: datetime) -> PlanState:
        """Upcoming before ``start``, active in ``[start, end)``, ended from ``end`` on."""
        if now < self.start:
            return PlanState.UPCOMING
        if now < self.end:
            return PlanState.ACTIVE
        return PlanState.ENDED
