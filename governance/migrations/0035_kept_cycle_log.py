"""The cycle log: one row per committed cycle of a queue (its number, a token and the jobs
it took off the change log), so a worker whose kept engine is a few cycles old catches up
on what other workers' cycles saw change instead of reading the whole queue again
(scheduler/cycle/kept.py). It replaces ``governance_cyclemark``, which only told that
another cycle had run. The product's role gets its rights from the default privileges
of 0021_security_review.
"""

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0034_inc_cycle_changes"),
    ]

    operations = [
        migrations.CreateModel(
            name="CycleLog",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("queue_id", models.BigIntegerField()),
                ("seq", models.BigIntegerField()),
                ("token", models.BigIntegerField()),
                (
                    "jobs",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), default=list, size=None
                    ),
                ),
                ("whole", models.BooleanField(default=False)),
            ],
        ),
        migrations.DeleteModel(
            name="CycleMark",
        ),
        migrations.AddConstraint(
            model_name="cyclelog",
            constraint=models.UniqueConstraint(
                fields=("queue_id", "seq"), name="cyclelog_queue_seq"
            ),
        ),
    ]
