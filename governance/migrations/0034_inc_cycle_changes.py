"""The change log a queue's cycle reads instead of every active job
(docs/architecture.md#a-cycle).

- ``governance_cyclechange``: (queue, job) of every write to an active job, inserted by
  the trigger below in the writer's transaction. "Active": pending or running before or
  after the write, so a job that finishes, starts, moves or is deleted is logged too.
  The cycle deletes its queue's rows under the queue's lock and re-reads those jobs.
- ``governance_cyclemark``: the token of each queue's last committed cycle.

The trigger is written once here, not by the services, so a write no service announces
(a bulk update, an admin's edit, a test's factory) still reaches the next cycle. The
product's role gets its rights on both tables from the default privileges of
0021_security_review.
"""

from django.db import migrations, models

# The columns a cycle reads of a job (``scheduler.cycle.read.JOB_FIELDS``) and its queue:
# an update that changes none of them (an agent's heartbeat) is not logged.
# ``tests/services/test_cycle_kept.py`` checks the trigger names every column the cycle reads.
WATCHED = (
    "queue_id",
    "state",
    "share_id",
    "kind",
    "priority",
    "submitted_at",
    "preferences",
    "max_pending",
    "checkpoint_interval",
    "duration",
    "restart_overhead",
    "preemptions",
    "counted_preemptions",
    "recomputed",
    "started_at",
    "checkpoint_work",
    "work_done",
    "instance_type_id",
    "plan_id",
    "preference",
    "run_started_at",
    "progress_at",
    "run",
    "may_borrow",
    "preemptible",
    "deadline",
    "max_cost",
    "workload_id",
)
OLD = ", ".join(f"OLD.{name}" for name in WATCHED)
NEW = ", ".join(f"NEW.{name}" for name in WATCHED)

FORWARD = f"""
CREATE OR REPLACE FUNCTION governance_job_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF ROW({OLD}) IS NOT DISTINCT FROM ROW({NEW}) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state IN ('PENDING', 'RUNNING') THEN
        INSERT INTO governance_cyclechange (queue_id, job_id) VALUES (NEW.queue_id, NEW.id);
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.state IN ('PENDING', 'RUNNING') AND (
        TG_OP = 'DELETE' OR NEW.queue_id <> OLD.queue_id
        OR NEW.state NOT IN ('PENDING', 'RUNNING')
    ) THEN
        INSERT INTO governance_cyclechange (queue_id, job_id) VALUES (OLD.queue_id, OLD.id);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER governance_job_changed
AFTER INSERT OR UPDATE OR DELETE ON governance_job
FOR EACH ROW EXECUTE FUNCTION governance_job_changed();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS governance_job_changed ON governance_job;
DROP FUNCTION IF EXISTS governance_job_changed();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0033_audit_chains"),
    ]

    operations = [
        migrations.CreateModel(
            name="CycleChange",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("queue_id", models.BigIntegerField(db_index=True)),
                ("job_id", models.BigIntegerField(null=True)),
            ],
        ),
        migrations.CreateModel(
            name="CycleMark",
            fields=[
                ("queue_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("token", models.BigIntegerField()),
            ],
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
