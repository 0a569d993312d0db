"""Idempotency keys: a creating request sent with an ``Idempotency-Key`` header and the
answer it got, so that a client retrying it gets that answer again instead of a second
object (governance/services/idempotency.py)."""

from __future__ import annotations

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone


class IdempotencyKey(models.Model):
    # Keys are per user: two clients picking the same key never see each other's answers.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # "POST /api/jobs/", for the message when the key is reused on another endpoint.
    endpoint = models.CharField(max_length=300)
    # SHA-256 of the endpoint and the canonical JSON of the request body.
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.JSONField(encoder=DjangoJSONEncoder)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # The database, not Redis, makes concurrent duplicates wait for the first one.
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_per_user")
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_key_created")]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.key}"
