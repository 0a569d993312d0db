from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0021_security_review"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="may_borrow",
            field=models.BooleanField(default=True),
        ),
        migrations.AddField(
            model_name="job",
            name="preemptible",
            field=models.BooleanField(default=True),
        ),
        migrations.AddField(
            model_name="job",
            name="deadline",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="max_cost",
            field=models.DecimalField(blank=True, decimal_places=2, max_digits=14, null=True),
        ),
    ]
