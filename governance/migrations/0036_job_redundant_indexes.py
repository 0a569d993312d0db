"""Three indexes of the job table that others cover: (queue, state) and queue alone are
prefixes of ``job_queue_state_order``, share alone of (share, state). Each index is written
on every insert and on every change of a job's state, so each was paid for on every
submission and admission and used by no plan the covering ones do not serve.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0035_kept_cycle_log"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="job",
            name="governance__queue_i_6d6e6a_idx",
        ),
        migrations.AlterField(
            model_name="job",
            name="queue",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="jobs",
                to="governance.jobqueue",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="share",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="jobs",
                to="governance.share",
            ),
        ),
    ]
