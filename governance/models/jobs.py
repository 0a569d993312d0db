"""Jobs and their event timeline."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from governance.models.capacity import InstanceType, JobQueue
from governance.models.shares import Share

MAX_PREFERENCES = 5


class JobKind(models.TextChoices):
    TRAINING = "training", "Training"
    PROCESSING = "processing", "Processing"


class JobState(models.TextChoices):
    PENDING = "PENDING", "Pending"
    RUNNING = "RUNNING", "Running"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"
    TIMED_OUT = "TIMED_OUT", "Timed out"
    CANCELLED = "CANCELLED", "Cancelled"


ACTIVE_STATES = (JobState.PENDING, JobState.RUNNING)


class Job(models.Model):
    # No index of their own: the composite indexes below start with each (every index is
    # written on each insert, and on each change of state, which moves an indexed column).
    queue = models.ForeignKey(
        JobQueue, on_delete=models.PROTECT, related_name="jobs", db_index=False
    )
    share = models.ForeignKey(Share, on_delete=models.PROTECT, related_name="jobs", db_index=False)
    name = models.CharField(max_length=200)
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    kind = models.CharField(max_length=16, choices=JobKind.choices, default=JobKind.TRAINING)
    priority = models.PositiveIntegerField(default=0)
    # Ordered list of {"instance_type": name, "count": n}, or {"plan": name, "count": n}
    # for a capacity plan of the share (training jobs only); counts are resolved at
    # submission (a common count is copied into every preference and kept in ``count``).
    preferences = models.JSONField()
    count = models.PositiveIntegerField(null=True, blank=True)
    max_pending = models.PositiveIntegerField(null=True, blank=True)
    checkpoint_interval = models.PositiveIntegerField(null=True, blank=True)
    # Work in seconds at speed 1.0; the simulated fleet runs a job for this long.
    duration = models.PositiveIntegerField(null=True, blank=True)
    restart_overhead = models.PositiveIntegerField(default=0)
    # Interruption classes and constrained fallback (docs/scheduling.md): False never
    # borrows / is never an in-share priority victim; a preference whose run would end
    # after ``deadline`` or cost more than ``max_cost`` (queue currency) is not eligible.
    # A preference may carry "runtime" (expected seconds on it).
    may_borrow = models.BooleanField(default=True)
    preemptible = models.BooleanField(default=True)
    deadline = models.DateTimeField(null=True, blank=True)
    max_cost = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    # What to run, for executors that run programs (Slurm): {"command": [argv...]} or
    # {"script": "#!..."}, with optional "workdir" and "env" ({NAME: value}); empty for
    # the simulated fleet and agents. Checked by ``services.slurm.clean_program``.
    program = models.JSONField(default=dict, blank=True)
    # The workload (of the share's team) this job is a run of (docs/workloads.md).
    workload = models.ForeignKey(
        "governance.Workload",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
    )
    # Filled from the workload's preference template (docs/workloads.md#preference-templates):
    # {"entries": [{"position", "certification", "reason"}] in the order of ``preferences``,
    # "skipped": [{"position", "configuration", "why"}]}; empty when the job gave its own.
    template = models.JSONField(default=dict, blank=True)
    # An admin's reason for running it in a certified-only share with uncertified
    # preferences (audited); empty otherwise.
    certification_override = models.CharField(max_length=500, blank=True, default="")
    # A resumed run's output: confirmed valid (True) or invalid (False) by the executor's
    # completion report or a lead; null while nobody said.
    output_valid = models.BooleanField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=JobState.choices, default=JobState.PENDING)
    instance_type = models.ForeignKey(
        InstanceType, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    preference = models.PositiveSmallIntegerField(null=True, blank=True)
    # The capacity plan the current (or last) run was admitted on; null for on-demand.
    plan = models.ForeignKey(
        "governance.CapacityPlan",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
    )
    borrowed = models.PositiveIntegerField(default=0)
    preemptions = models.PositiveIntegerField(default=0)
    # Preemptions that count against the share's retry limit (lost capacity does not).
    counted_preemptions = models.PositiveIntegerField(default=0)
    submitted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Progress, in work units (seconds at speed 1.0): ``work_done`` is the latest progress
    # known (what the run started from, or an executor's last report, made at
    # ``progress_at``), ``checkpoint_work`` what the last checkpoint saved. Work at a later
    # time and lost work at a preemption follow from these (docs/scheduling.md, "Work and lost
    # work").
    run_started_at = models.DateTimeField(null=True, blank=True)
    work_done = models.FloatField(default=0)
    progress_at = models.DateTimeField(null=True, blank=True)
    checkpoint_work = models.FloatField(default=0)
    recomputed = models.FloatField(default=0)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Each admission starts a new run; executor reports name the run they belong to, so a
    # late report from a preempted run can never touch the next one.
    run = models.PositiveIntegerField(default=0)
    # External agents: who claimed the current run, and the stop order after a preemption.
    agent = models.CharField(max_length=100, blank=True, default="")
    # The credential (an ``agent`` group user) that claimed the current run: only it may
    # report on the run or acknowledge its stop order (docs/agents.md).
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    stop_requested_run = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["share", "state"]),
            models.Index(fields=["state", "submitted_at"]),
            # The jobs page lists newest first (ORDER BY submitted_at DESC, id DESC LIMIT 50).
            models.Index(fields=["-submitted_at", "-id"], name="job_submitted_desc"),
            # A queue page's pending and running lists, 50 at a time in the engine's order.
            models.Index(
                fields=["queue", "state", "-priority", "submitted_at", "id"],
                name="job_queue_state_order",
            ),
            models.Index(
                fields=["queue", "state", "-priority", "started_at", "id"],
                name="job_queue_state_started",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.pk})"


class JobEvent(models.Model):
    # No index of its own: (job, at) below serves the key's lookups too.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", db_index=False)
    at = models.DateTimeField()
    type = models.CharField(max_length=32)
    message = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"])]

    def __str__(self) -> str:
        return f"{self.job_id} {self.type} at {self.at}"
