"""Governance data, one module per aggregate (DESIGN section 1 gives the meanings)."""

from governance.models.agreements import Agreement, AgreementVersion
from governance.models.audit import AuditChainHead, AuditEntry, AuditEvent
from governance.models.capacity import InstanceType, JobQueue, QueueCapacity
from governance.models.exceptions import ExceptionState, PriorityException
from governance.models.jobs import Job, JobEvent, JobKind, JobState
from governance.models.priorities import PriorityDefinition
from governance.models.shares import Policy, Share, ShareLimit
from governance.models.teams import Membership, MembershipRole, Team

__all__ = [
    "Agreement",
    "AgreementVersion",
    "AuditChainHead",
    "AuditEntry",
    "AuditEvent",
    "ExceptionState",
    "InstanceType",
    "Job",
    "JobEvent",
    "JobKind",
    "JobQueue",
    "JobState",
    "Membership",
    "MembershipRole",
    "Policy",
    "PriorityDefinition",
    "PriorityException",
    "QueueCapacity",
    "Share",
    "ShareLimit",
    "Team",
]
