import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0029_decisions"),
    ]

    operations = [
        migrations.CreateModel(
            name="SignalAnswer",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("start", models.DateTimeField()),
                ("stop", models.DateTimeField()),
                ("group_by", models.CharField(max_length=8)),
                ("last_event", models.BigIntegerField()),
                ("last_job", models.BigIntegerField()),
                ("last_audit", models.BigIntegerField()),
                ("shape", models.CharField(max_length=64)),
                ("answer", models.JSONField()),
                ("computed_at", models.DateTimeField()),
                (
                    "queue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="governance.jobqueue",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "start", "stop", "group_by"), name="signal_answer_window"
                    )
                ],
            },
        ),
    ]
