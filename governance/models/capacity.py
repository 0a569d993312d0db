"""Instance types and job queues with their capacity per type."""

from __future__ import annotations

from django.db import models


class InstanceType(models.Model):
    name = models.CharField(max_length=64, unique=True)
    accelerated = models.BooleanField(default=True)
    accelerators = models.PositiveIntegerField(default=0)
    speed = models.FloatField(default=1.0)
    hourly_price = models.DecimalField(max_digits=10, decimal_places=4, default=0)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(speed__gt=0), name="instance_type_speed_gt_0"
            ),
            models.CheckConstraint(
                condition=models.Q(hourly_price__gte=0), name="instance_type_price_gte_0"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Executor(models.TextChoices):
    SIMULATED = "simulated", "Simulated fleet"
    AGENT = "agent", "External agents"
    SLURM = "slurm", "Slurm cluster"


class JobQueue(models.Model):
    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    executor = models.CharField(max_length=16, choices=Executor.choices, default=Executor.SIMULATED)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class QueueCapacity(models.Model):
    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="capacities")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    count = models.PositiveIntegerField()

    class Meta:
        ordering = ["queue", "instance_type__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "instance_type"], name="queue_capacity_unique_type"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}: {self.count} x {self.instance_type}"
