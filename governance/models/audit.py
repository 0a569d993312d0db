"""The audit trail: append-only, one entry per change and per scheduling decision."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from django.conf import settings
from django.db import models


class DecisionRule(models.TextChoices):
    """The rule behind a scheduling decision or a run's end, as audit entries and job
    events name it (``after.rule``); labels are what the pages say."""

    OWN = "own", "within its own limit"
    BORROW = "borrow", "borrowed capacity, open to reclaim"
    RECLAIM = "reclaim", "reclaim"
    PRIORITY = "priority", "higher priority"
    CAPACITY_LOST = "capacity_lost", "capacity lost"
    PLAN = "plan", "on its share's capacity plan"
    PLAN_ENDED = "plan_ended", "capacity plan ended"
    TIMEOUT = "timeout", "max pending time reached"
    RETRIES_EXHAUSTED = "preemption_retries_exhausted", "preemption retries exhausted"
    HEARTBEAT_LOST = "heartbeat_lost", "agent stopped reporting"
    EXECUTOR = "executor", "the job itself failed"
    SLURM_LOST = "slurm_lost", "Slurm no longer knows the job"


class AuditEvent(models.TextChoices):
    TEAM_CREATED = "team.created"
    TEAM_UPDATED = "team.updated"
    MEMBERSHIP_CHANGED = "team.membership_changed"
    INSTANCE_TYPE_CREATED = "instance_type.created"
    INSTANCE_TYPE_UPDATED = "instance_type.updated"
    QUEUE_CREATED = "queue.created"
    QUEUE_UPDATED = "queue.updated"
    CAPACITY_CHANGED = "queue.capacity_changed"
    SHARE_CREATED = "share.created"
    SHARE_UPDATED = "share.updated"
    SHARE_DELETED = "share.deleted"
    PRIORITY_DEFINITION_CREATED = "priority_definition.created"
    PRIORITY_DEFINITION_UPDATED = "priority_definition.updated"
    PRIORITY_DEFINITION_DELETED = "priority_definition.deleted"
    EXCEPTION_FILED = "exception.filed"
    EXCEPTION_APPROVED = "exception.approved"
    EXCEPTION_REJECTED = "exception.rejected"
    EXCEPTION_WITHDRAWN = "exception.withdrawn"
    EXCEPTION_EXPIRED = "exception.expired"
    CHANGE_REQUEST_FILED = "change_request.filed"
    CHANGE_REQUEST_APPROVED = "change_request.approved"
    CHANGE_REQUEST_REJECTED = "change_request.rejected"
    CHANGE_REQUEST_WITHDRAWN = "change_request.withdrawn"
    EXCEPTION_CLOSED = "exception.closed"
    NOTIFICATION_PREFERENCES_CHANGED = "notification.preferences_changed"
    AGREEMENT_CREATED = "agreement.created"
    AGREEMENT_UPDATED = "agreement.updated"
    JOB_SUBMITTED = "job.submitted"
    JOB_REPRIORITISED = "job.reprioritised"
    JOB_CANCELLED = "job.cancelled"
    JOB_ADMITTED = "job.admitted"
    JOB_PREEMPTED = "job.preempted"
    JOB_FAILED = "job.failed"
    JOB_TIMED_OUT = "job.timed_out"
    JOB_STARTED = "job.started"
    JOB_CHECKPOINTED = "job.checkpointed"
    JOB_COMPLETED = "job.completed"
    JOB_LOST = "job.lost"
    USER_CREATED = "user.created"
    USER_UPDATED = "user.updated"
    USER_ROLES_CHANGED = "user.roles_changed"
    USER_DEACTIVATED = "user.deactivated"
    USER_REACTIVATED = "user.reactivated"
    TOKEN_CREATED = "user.token_created"
    TOKEN_REVOKED = "user.token_revoked"
    PLAN_CREATED = "plan.created"
    PLAN_RESIZED = "plan.resized"
    PLAN_ENDED = "plan.ended"
    WHATIF_REQUESTED = "whatif.requested"
    WHATIF_ATTACHED = "whatif.attached"
    SLURM_CONFIG_CHANGED = "queue.slurm_config_changed"
    EXECUTOR_FAILED = "executor.failed"
    EXECUTOR_PAUSED = "executor.paused"
    EXECUTOR_RESUMED = "executor.resumed"
    EXECUTOR_DRIFT = "executor.drift"
    WORKLOAD_CREATED = "workload.created"
    WORKLOAD_UPDATED = "workload.updated"
    WORKLOAD_RECOVERY_CHANGED = "workload.recovery_changed"
    JOB_OUTPUT_JUDGED = "job.output_judged"
    DECISION_OPENED = "decision.opened"
    DECISION_RESUBMITTED = "decision.resubmitted"
    DECISION_RECLASSIFIED = "decision.reclassified"
    DECISION_CLOSED = "decision.closed"
    CERTIFICATION_PROPOSED = "certification.proposed"
    CERTIFICATION_CERTIFIED = "certification.certified"
    CERTIFICATION_REJECTED = "certification.rejected"
    CERTIFICATION_REVOKED = "certification.revoked"
    WORKLOAD_TEMPLATE_CHANGED = "workload.template_changed"
    JOB_CERTIFICATION_OVERRIDDEN = "job.certification_overridden"


GENESIS_HASH = "0" * 64


SITE_CHAIN = "site"


def chain_of_queue(queue_id: int | None) -> str:
    """The chain a queue's scheduling cycles write to (``queue-<id>``), or the site's
    without a queue; the queue's other writers use its lanes, ``queue-<id>.1`` to ``.4``,
    one per transaction (the database chooses: migrations 0033 and 0038)."""
    return SITE_CHAIN if queue_id is None else f"queue-{queue_id}"


class AuditChainHead(models.Model):
    """One chain's newest link: one row per chain (``site``, ``queue-<id>`` and its lanes
    ``queue-<id>.<n>``), locked by each committing writer of that chain only, so writes to
    different queues, and most concurrent writes to one queue, do not wait for one another
    (docs/operations.md, "Audit trail").

    Written only by the database's seal trigger (migrations 0010, 0033, 0037, 0038), never by
    Python code; the seal creates a chain's head with its first entry.
    """

    chain = models.CharField(max_length=40, primary_key=True, default=SITE_CHAIN)
    last_seq = models.BigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, default=GENESIS_HASH)

    def __str__(self) -> str:
        return f"audit chain {self.chain} at {self.last_seq}: {self.last_hash[:12]}"


def audit_key_id(key: str) -> str:
    """The name of an audit key that does not reveal it: 16 hex digits of its sha256."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def checkpoint_mac(key: str, chain_seq: int, chain_hash: str, chain: str = SITE_CHAIN) -> str:
    """HMAC-SHA256 of a chain's head (its link number and hash) under ``key``. The site
    chain's message is the one checkpoints signed before there were several chains, so
    they still verify; another chain's message names the chain."""
    name = "" if chain == SITE_CHAIN else f"{chain}:"
    message = f"governance-audit:{name}{chain_seq}:{chain_hash}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


class AuditCheckpoint(models.Model):
    """The chain's head at one moment, signed with the audit key (an HMAC whose key lives
    outside the database: ``settings.AUDIT_KEY``). Written by beat's checkpoint task
    (``services.audit.checkpoint``); append-only like the entries. An entry changed and
    the chain re-sealed inside the database no longer leads to a signed head, so
    ``audit_verify`` finds it, and so does an entry removed below a signed head. One
    checkpoint signs one chain's head."""

    chain = models.CharField(max_length=40, default=SITE_CHAIN)
    chain_seq = models.BigIntegerField()
    chain_hash = models.CharField(max_length=64)
    # Which key signed it (the first 16 hex digits of its sha256), so old keys still verify
    # after a rotation (``AUDIT_OLD_KEYS``).
    key_id = models.CharField(max_length=16)
    mac = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chain", "chain_seq"], name="audit_checkpoint_chain_link"
            )
        ]

    def __str__(self) -> str:
        return f"audit checkpoint of {self.chain} at {self.chain_seq}"


class AppendOnlyError(Exception):
    """Audit entries are never changed or deleted once written."""


class AuditEntry(models.Model):
    event_type = models.CharField(max_length=40, choices=AuditEvent.choices)
    # Null actor means the system (the scheduler, beat).
    # The foreign keys need no index of their own: each leads a (key, -created_at) index
    # below, which serves their lookups too, and every audited write maintains each index.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )
    subject_type = models.CharField(max_length=40)
    subject_id = models.CharField(max_length=64)
    subject_repr = models.CharField(max_length=300, blank=True, default="")
    # Denormalised links so the trail can be filtered by team, share, job and queue fast.
    team = models.ForeignKey(
        "governance.Team",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    share = models.ForeignKey(
        "governance.Share",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    job = models.ForeignKey(
        "governance.Job",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    queue = models.ForeignKey(
        "governance.JobQueue",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_index=True)
    # The hash chains (migrations 0010, 0033, 0037, 0038). ``chain`` is set by the database
    # on insert from ``queue`` and the transaction (``chain_of_queue``; entries older than
    # 0033 are all in the site chain). The rest is set by the database when the writing
    # transaction commits, so they stay null on the object ``create`` returns.
    # ``chain_seq`` is the entry's place in its chain (commit order, which may differ from
    # id order);
    # ``hash`` = sha256(``prev_hash`` + the entry's content). ``audit_verify`` checks them.
    # Null (not "") means not sealed yet: only inside the writing transaction.
    chain = models.CharField(max_length=40, default=SITE_CHAIN, editable=False)
    chain_seq = models.BigIntegerField(null=True, blank=True, editable=False)
    prev_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001
    hash = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["event_type", "-created_at"]),
            models.Index(fields=["actor", "-created_at"]),
            models.Index(fields=["team", "-created_at"]),
            models.Index(fields=["share", "-created_at"]),
            models.Index(fields=["job", "-created_at"]),
            models.Index(fields=["queue", "-created_at"]),
            # One subject's history (the exception page), oldest first.
            models.Index(fields=["subject_type", "subject_id", "created_at"], name="audit_subject"),
            # The overview's decision feed (governance.web.presenters.overview.FEED_EVENTS):
            # its newest 30, and the cache key naming them, read from this index alone.
            models.Index(
                fields=["-created_at", "-id"],
                name="audit_feed",
                condition=models.Q(
                    event_type__in=[
                        AuditEvent.JOB_ADMITTED,
                        AuditEvent.JOB_PREEMPTED,
                        AuditEvent.JOB_FAILED,
                        AuditEvent.JOB_TIMED_OUT,
                        AuditEvent.JOB_COMPLETED,
                        AuditEvent.JOB_LOST,
                    ]
                ),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.event_type} {self.subject_repr}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise AppendOnlyError("audit entries cannot be changed")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("audit entries cannot be deleted")
