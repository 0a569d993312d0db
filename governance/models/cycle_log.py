"""What a queue's scheduling cycle needs to know about changes since its last run, so a
worker that kept the queue's engine reads only what changed (docs/architecture.md#a-cycle).

- :class:`CycleChange`: one row per write to an active job (pending or running before or
  after the write), inserted by a trigger on the job table in the writer's own
  transaction (migration ``0034_inc_cycle_changes``), so no writer can forget it and an
  uncommitted change is simply read by the next cycle. The cycle consumes its queue's rows
  under the queue's lock (``DELETE ... RETURNING``).
- :class:`CycleLog`: one row per committed cycle of a queue, numbered (``seq``, under the
  queue's lock) and carrying a random token and the jobs it took off the change log. A
  worker whose kept engine is from cycle ``seq`` reads the rows after it to learn what
  other processes' cycles saw change since, and catches up on those jobs alone; a gap
  (the rows are kept for the last ``KEPT_CYCLES`` cycles) or another token at its
  ``seq`` (a database restored, a rolled-back cycle's successor) means a full read.

Plain integer columns, no foreign keys: a row must never hold up a job's or a queue's
deletion, and a stale row costs the next cycle one look-up.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models


class CycleChange(models.Model):
    id = models.BigAutoField(primary_key=True)
    queue_id = models.BigIntegerField(db_index=True)
    job_id = models.BigIntegerField(null=True)
    """None: something other than one job changed; the next cycle reloads in full."""

    def __str__(self) -> str:
        return f"queue {self.queue_id}: job {self.job_id}"


class CycleLog(models.Model):
    id = models.BigAutoField(primary_key=True)
    queue_id = models.BigIntegerField()
    seq = models.BigIntegerField()
    """The cycle's number within its queue: the last one's plus one."""
    token = models.BigIntegerField()
    """Random: tells this cycle from another that once had the same number."""
    jobs = ArrayField(models.BigIntegerField(), default=list)
    """The jobs the cycle took off the change log (``CycleChange``)."""
    whole = models.BooleanField(default=False)
    """Something other than one job was logged as changed: a kept engine from before
    this cycle reads in full."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue_id", "seq"], name="cyclelog_queue_seq"),
        ]

    def __str__(self) -> str:
        return f"queue {self.queue_id}: cycle {self.seq}"
