"""Governance data, one module per aggregate (docs/data-model.md gives the meanings)."""

from governance.models.agreements import (
    Agreement,
    AgreementVersion,
    Promise,
    PromiseEvaluation,
    PromiseState,
)
from governance.models.audit import (
    AuditChainHead,
    AuditCheckpoint,
    AuditEntry,
    AuditEvent,
    DecisionRule,
)
from governance.models.capacity import InstanceType, JobQueue, QueueCapacity
from governance.models.certifications import (
    Certification,
    CertificationState,
    PreferenceTemplate,
    TemplateEntry,
)
from governance.models.change_requests import ChangeRequestState, ShareChangeRequest
from governance.models.cycle_log import CycleChange, CycleLog
from governance.models.decisions import Decision, DecisionState
from governance.models.exceptions import ExceptionState, PriorityException
from governance.models.idempotency import IdempotencyKey
from governance.models.insight import JobForecast, UsageLevel, UsageRollup
from governance.models.jobs import Job, JobEvent, JobKind, JobState
from governance.models.notifications import (
    Notification,
    NotificationKind,
    NotificationPreference,
)
from governance.models.plans import CapacityPlan, PlanState
from governance.models.priorities import PriorityDefinition
from governance.models.shares import Policy, Share, ShareLimit
from governance.models.signal_store import SignalAnswer
from governance.models.slurm import (
    SlurmDrift,
    SlurmQueueConfig,
    SlurmRun,
    SlurmRunState,
    SlurmTeamConfig,
    SlurmTypeConfig,
)
from governance.models.teams import Membership, MembershipRole, Team
from governance.models.whatif import WhatIf, WhatIfState
from governance.models.workloads import Interruption, RecoveryChange, RecoveryStatus, Workload

__all__ = [
    "Agreement",
    "AgreementVersion",
    "AuditChainHead",
    "AuditCheckpoint",
    "AuditEntry",
    "AuditEvent",
    "CapacityPlan",
    "Certification",
    "CertificationState",
    "ChangeRequestState",
    "CycleChange",
    "CycleLog",
    "Decision",
    "DecisionRule",
    "DecisionState",
    "ExceptionState",
    "IdempotencyKey",
    "InstanceType",
    "Interruption",
    "Job",
    "JobEvent",
    "JobForecast",
    "JobKind",
    "JobQueue",
    "JobState",
    "Membership",
    "MembershipRole",
    "Notification",
    "NotificationKind",
    "NotificationPreference",
    "PlanState",
    "Policy",
    "PreferenceTemplate",
    "PriorityDefinition",
    "PriorityException",
    "Promise",
    "PromiseEvaluation",
    "PromiseState",
    "QueueCapacity",
    "RecoveryChange",
    "RecoveryStatus",
    "Share",
    "ShareChangeRequest",
    "ShareLimit",
    "SignalAnswer",
    "SlurmDrift",
    "SlurmQueueConfig",
    "SlurmRun",
    "SlurmRunState",
    "SlurmTeamConfig",
    "SlurmTypeConfig",
    "Team",
    "TemplateEntry",
    "UsageLevel",
    "UsageRollup",
    "WhatIf",
    "WhatIfState",
    "Workload",
]
