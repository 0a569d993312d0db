"""How a queue run by the ``slurm`` executor maps onto a Slurm cluster, and the Slurm jobs
that carry its runs (docs/slurm.md)."""

from __future__ import annotations

from django.db import models

from governance.models.capacity import InstanceType, JobQueue
from governance.models.jobs import Job
from governance.models.teams import Team


class SlurmQueueConfig(models.Model):
    """Per queue: what to submit under, and the executor's health.

    ``paused_since`` is set while Slurm cannot be reached: the executor then changes
    nothing (no run is declared lost, no capacity dropped) and the pages say since when.
    """

    queue = models.OneToOneField(JobQueue, on_delete=models.CASCADE, related_name="slurm")
    account = models.CharField(max_length=64, blank=True, default="")
    qos = models.CharField(max_length=64, blank=True, default="")
    # Seconds between the signal and the cancel of a preempted or cancelled run.
    grace_seconds = models.PositiveIntegerField(default=10)
    paused_since = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    failures = models.PositiveIntegerField(default=0)
    retry_at = models.DateTimeField(null=True, blank=True)
    # What the drift guard does with a Slurm job beyond what the product admitted on the
    # queue's partitions: cancel it (the default) or only report it.
    drift_report_only = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"Slurm config of {self.queue}"


class SlurmTeamConfig(models.Model):
    """Per queue and team: the Unix user the team's jobs run as (submitted and cancelled
    as that user), and optionally the Slurm account and QOS they are charged to
    (docs/slurm.md#security-model)."""

    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="slurm_teams")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    unix_user = models.CharField(max_length=32)
    account = models.CharField(max_length=64, blank=True, default="")
    qos = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["queue", "team__name"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "team"], name="slurm_team_unique_per_queue"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}: {self.team} as {self.unix_user}"


class SlurmTypeConfig(models.Model):
    """How Slurm expresses one instance type of a queue: the partition and/or node feature
    its nodes carry, and how many GPUs (of which gres name) one instance is."""

    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="slurm_types")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    partition = models.CharField(max_length=64, blank=True, default="")
    feature = models.CharField(max_length=64, blank=True, default="")
    gpus_per_instance = models.PositiveIntegerField(default=1)
    gres_name = models.CharField(max_length=32, default="gpu")

    class Meta:
        ordering = ["queue", "instance_type__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "instance_type"], name="slurm_type_unique_per_queue"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}: {self.instance_type} on {self.partition or self.feature}"


class SlurmRunState(models.TextChoices):
    SUBMITTING = "SUBMITTING", "Submitting"
    SUBMITTED = "SUBMITTED", "Submitted"
    STOPPING = "STOPPING", "Stopping"
    ENDED = "ENDED", "Ended"


class SlurmRun(models.Model):
    """One Slurm job: the carrier of one run of a product job (a new admission is a new
    Slurm job). Created before ``sbatch`` is called, so a submission whose answer was lost
    is found again by its name and never submitted twice."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="slurm_runs")
    run = models.PositiveIntegerField()
    name = models.CharField(max_length=100, unique=True)
    state = models.CharField(
        max_length=12, choices=SlurmRunState.choices, default=SlurmRunState.SUBMITTING
    )
    slurm_job_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    partition = models.CharField(max_length=64, blank=True, default="")
    stdout = models.CharField(max_length=1024, blank=True, default="")
    stderr = models.CharField(max_length=1024, blank=True, default="")
    slurm_state = models.CharField(max_length=32, blank=True, default="")
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)  # the signal that ended the job
    unix_user = models.CharField(max_length=32, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    retry_at = models.DateTimeField(null=True, blank=True)
    started_seen = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    signalled_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "run"]
        constraints = [
            models.UniqueConstraint(fields=["job", "run"], name="slurm_run_unique_run"),
        ]
        indexes = [models.Index(fields=["state"])]

    def __str__(self) -> str:
        return f"{self.name} (Slurm job {self.slurm_job_id})"


class SlurmDrift(models.Model):
    """A Slurm job on a queue's partitions beyond what the product admitted, as the drift
    guard found it: a job the product did not submit, or a product job holding more than
    its admission (docs/slurm.md#security-model). One row per Slurm job."""

    queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="slurm_drifts")
    slurm_job_id = models.BigIntegerField()
    user = models.CharField(max_length=64, blank=True, default="")
    partition = models.CharField(max_length=64, blank=True, default="")
    # What was found, comma-separated: unknown (not the product's), gpus, nodes, array,
    # exclusive (beyond the admission of the product's job).
    kinds = models.CharField(max_length=100)
    details = models.JSONField(default=dict)
    run = models.ForeignKey(
        SlurmRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=16)  # "cancelled" or "reported"
    found_at = models.DateTimeField()
    seen_at = models.DateTimeField()
    gone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-found_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "slurm_job_id"], name="slurm_drift_unique_per_job"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}: Slurm job {self.slurm_job_id} ({self.kinds})"
