"""Share change requests: a lead asks for different share settings, an admin decides."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from governance.models.shares import Share
from governance.models.teams import Team

# The share fields a lead may propose (the share's identity, team and on/off switch
# stay the admins' own decisions).
REQUESTABLE_FIELDS = (
    "limits",
    "policy",
    "borrow_limit",
    "in_share_preemption",
    "preemption_retries",
    "borrow_requires_verified_recovery",
    "certified_only",
)
MAX_JUSTIFICATION = 4000
MAX_NOTE = 2000


class ChangeRequestState(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn"


class ShareChangeRequest(models.Model):
    share = models.ForeignKey(Share, on_delete=models.PROTECT, related_name="change_requests")
    # The share's team when the request was filed (the audit trail and the team view
    # follow it even if the share moves to another team later).
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="change_requests")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="change_requests"
    )
    # Only the fields proposed, as the share service takes them (limits: {type: count}).
    proposed = models.JSONField()
    justification = models.TextField()
    # The share as the requester saw it (share_snapshot) and its version then.
    base = models.JSONField()
    base_version = models.PositiveIntegerField()
    # The share editor's impact preview, at filing and again at the decision.
    preview = models.JSONField()
    decision_preview = models.JSONField(null=True, blank=True)
    state = models.CharField(
        max_length=10, choices=ChangeRequestState.choices, default=ChangeRequestState.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="change_requests_decided",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, default="")
    # The share's version that the approval saved (its own version when nothing changed).
    applied_version = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "-created_at"], name="change_request_state"),
            models.Index(fields=["share", "-created_at"], name="change_request_share"),
        ]

    def __str__(self) -> str:
        return f"change request {self.pk}: share {self.share_id} ({self.state})"
