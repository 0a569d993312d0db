"""What a queue's scheduling cycle needs to know about changes since its last run, so a
worker that kept the queue's engine reads only what changed (docs/architecture.md#a-cycle).

- :class:`CycleChange`: one row per write to an active job (pending or running before or
  after the write), inserted by a trigger on the job table in the writer's own
  transaction (migration ``0034_inc_cycle_changes``), so no writer can forget it and an
  uncommitted change is simply read by the next cycle. The cycle consumes its queue's rows
  under the queue's lock (``DELETE ... RETURNING``).
- :class:`CycleMark`: a random token each committed cycle of a queue leaves; a worker
  whose kept engine carries another token knows another process (or a rolled-back
  cycle's successor) ran the queue since, and reloads in full.

Plain integer columns, no foreign keys: a row must never hold up a job's or a queue's
deletion, and a stale row costs the next cycle one look-up.
"""

from __future__ import annotations

from django.db import models


class CycleChange(models.Model):
    id = models.BigAutoField(primary_key=True)
    queue_id = models.BigIntegerField(db_index=True)
    job_id = models.BigIntegerField(null=True)
    """None: something other than one job changed; the next cycle reloads in full."""

    def __str__(self) -> str:
        return f"queue {self.queue_id}: job {self.job_id}"


class CycleMark(models.Model):
    queue_id = models.BigIntegerField(primary_key=True)
    token = models.BigIntegerField()

    def __str__(self) -> str:
        return f"queue {self.queue_id}: cycle {self.token}"
