# Slurm isolation (issue 25): per-team Unix users, the drift guard, signals that end jobs.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0023_change_requests"),
    ]

    operations = [
        migrations.AddField(
            model_name="slurmqueueconfig",
            name="drift_report_only",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="slurmrun",
            name="signal",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="slurmrun",
            name="unix_user",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="event_type",
            field=models.CharField(
                choices=[
                    ("team.created", "Team Created"),
                    ("team.updated", "Team Updated"),
                    ("team.membership_changed", "Membership Changed"),
                    ("instance_type.created", "Instance Type Created"),
                    ("instance_type.updated", "Instance Type Updated"),
                    ("queue.created", "Queue Created"),
                    ("queue.updated", "Queue Updated"),
                    ("queue.capacity_changed", "Capacity Changed"),
                    ("share.created", "Share Created"),
                    ("share.updated", "Share Updated"),
                    ("share.deleted", "Share Deleted"),
                    ("priority_definition.created", "Priority Definition Created"),
                    ("priority_definition.updated", "Priority Definition Updated"),
                    ("priority_definition.deleted", "Priority Definition Deleted"),
                    ("exception.filed", "Exception Filed"),
                    ("exception.approved", "Exception Approved"),
                    ("exception.rejected", "Exception Rejected"),
                    ("exception.withdrawn", "Exception Withdrawn"),
                    ("exception.expired", "Exception Expired"),
                    ("notification.preferences_changed", "Notification Preferences Changed"),
                    ("agreement.created", "Agreement Created"),
                    ("agreement.updated", "Agreement Updated"),
                    ("job.submitted", "Job Submitted"),
                    ("job.reprioritised", "Job Reprioritised"),
                    ("job.cancelled", "Job Cancelled"),
                    ("job.admitted", "Job Admitted"),
                    ("job.preempted", "Job Preempted"),
                    ("job.failed", "Job Failed"),
                    ("job.timed_out", "Job Timed Out"),
                    ("job.started", "Job Started"),
                    ("job.checkpointed", "Job Checkpointed"),
                    ("job.completed", "Job Completed"),
                    ("job.lost", "Job Lost"),
                    ("user.created", "User Created"),
                    ("user.updated", "User Updated"),
                    ("user.roles_changed", "User Roles Changed"),
                    ("user.deactivated", "User Deactivated"),
                    ("user.reactivated", "User Reactivated"),
                    ("user.token_created", "Token Created"),
                    ("user.token_revoked", "Token Revoked"),
                    ("plan.created", "Plan Created"),
                    ("plan.resized", "Plan Resized"),
                    ("plan.ended", "Plan Ended"),
                    ("whatif.requested", "Whatif Requested"),
                    ("whatif.attached", "Whatif Attached"),
                    ("queue.slurm_config_changed", "Slurm Config Changed"),
                    ("executor.failed", "Executor Failed"),
                    ("executor.paused", "Executor Paused"),
                    ("executor.resumed", "Executor Resumed"),
                    ("executor.drift", "Executor Drift"),
                ],
                max_length=40,
            ),
        ),
        migrations.AlterField(
            model_name="notification",
            name="kind",
            field=models.CharField(
                choices=[
                    ("exception_needs_review", "An exception needs review"),
                    ("exception_decided", "An exception was decided"),
                    ("job_preempted", "A job was preempted"),
                    ("job_failed", "A job failed"),
                    ("share_changed", "A share of your team changed"),
                    ("agreement_review_due", "An agreement reached its review date"),
                    ("slurm_drift", "Slurm runs a job beyond what the product admitted"),
                ],
                max_length=32,
            ),
        ),
        migrations.CreateModel(
            name="SlurmDrift",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("slurm_job_id", models.BigIntegerField()),
                ("user", models.CharField(blank=True, default="", max_length=64)),
                ("partition", models.CharField(blank=True, default="", max_length=64)),
                ("kinds", models.CharField(max_length=100)),
                ("details", models.JSONField(default=dict)),
                ("action", models.CharField(max_length=16)),
                ("found_at", models.DateTimeField()),
                ("seen_at", models.DateTimeField()),
                ("gone_at", models.DateTimeField(blank=True, null=True)),
                (
                    "queue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="slurm_drifts",
                        to="governance.jobqueue",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="governance.slurmrun",
                    ),
                ),
            ],
            options={
                "ordering": ["-found_at", "-id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "slurm_job_id"), name="slurm_drift_unique_per_job"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="SlurmTeamConfig",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("unix_user", models.CharField(max_length=32)),
                ("account", models.CharField(blank=True, default="", max_length=64)),
                ("qos", models.CharField(blank=True, default="", max_length=64)),
                (
                    "queue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="slurm_teams",
                        to="governance.jobqueue",
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="governance.team",
                    ),
                ),
            ],
            options={
                "ordering": ["queue", "team__name"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "team"), name="slurm_team_unique_per_queue"
                    )
                ],
            },
        ),
    ]
