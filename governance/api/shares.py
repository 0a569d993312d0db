"""``/api/shares/``: quota shares. Admins write; PATCH names the ``version`` it read.

A stale PATCH gets 409 with ``{"version": [...], "current": {...}}`` and changes nothing.
DELETE is refused (400 naming ``share``) for a share that has jobs, exceptions or change requests:
disable it instead. ``POST /api/shares/{id}/preview/`` takes proposed fields and answers
what the next cycle would do with them, computed by the engine on the live state.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import (
    CONFLICT_RESPONSE,
    ERROR_RESPONSES,
    CountMapField,
    ServiceViewSet,
)
from governance.models import JobQueue, Policy, Share, Team
from governance.selectors import scheduling
from governance.selectors import shares as share_selectors
from governance.selectors.windows import parse_window
from governance.services import shares as share_services


class ShareSerializer(serializers.ModelSerializer):
    limits = serializers.SerializerMethodField()
    queue_name = serializers.CharField(source="queue.name", read_only=True)
    team_name = serializers.CharField(source="team.name", read_only=True)

    class Meta:
        model = Share
        fields = [
            "id",
            "queue",
            "queue_name",
            "team",
            "team_name",
            "name",
            "policy",
            "borrow_limit",
            "limits",
            "in_share_preemption",
            "preemption_retries",
            "enabled",
            "borrow_requires_verified_recovery",
            "certified_only",
            "version",
        ]

    @extend_schema_field(CountMapField)
    def get_limits(self, share: Share) -> dict[str, int]:
        return share_selectors.limits_of(share)


class ShareWriteSerializer(serializers.Serializer):
    """Input for POST. ``limits`` is ``{type: count}``; ``reason`` goes to the audit trail."""

    queue = serializers.PrimaryKeyRelatedField(queryset=JobQueue.objects.all(), required=False)
    team = serializers.PrimaryKeyRelatedField(queryset=Team.objects.all(), required=False)
    name = serializers.CharField(required=False, allow_blank=True)
    policy = serializers.ChoiceField(choices=Policy.choices, required=False)
    borrow_limit = serializers.IntegerField(required=False, allow_null=True)
    limits = CountMapField(required=False)
    in_share_preemption = serializers.BooleanField(required=False)
    preemption_retries = serializers.IntegerField(required=False, allow_null=True)
    enabled = serializers.BooleanField(required=False)
    borrow_requires_verified_recovery = serializers.BooleanField(
        required=False,
        help_text="jobs of workloads whose recovery is not verified, and jobs naming none, "
        "never borrow (docs/workloads.md)",
    )
    certified_only = serializers.BooleanField(
        required=False,
        help_text="its jobs name a workload and every preference is a certified, unexpired "
        "configuration of it (docs/workloads.md)",
    )
    reason = serializers.CharField(required=False, allow_blank=True)


class ShareUpdateSerializer(ShareWriteSerializer):
    """Input for PATCH: only the fields to change, plus the ``version`` you read."""

    version = serializers.IntegerField(required=False)


class PreviewJobSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    name = serializers.CharField()
    share = serializers.CharField()
    team = serializers.CharField()
    rule = serializers.CharField(help_text="own, borrow, reclaim, priority or capacity_lost")
    instance_type = serializers.CharField(allow_null=True)


class PreviewSerializer(serializers.Serializer):
    preempted = PreviewJobSerializer(many=True)
    reclaimable = PreviewJobSerializer(many=True)
    started = PreviewJobSerializer(many=True)


LEDGER_RESPONSE = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description=(
        "The share's lending ledger (docs/ledger.md): `now` (`lent`: who holds its idle "
        "entitlement per type, with their runs, instances, since when and each run's "
        "exposure; `borrowed`: whose capacity it holds; `borrowing_runs`; `would_reclaim`: "
        "the victims its pending jobs take when the cycle due now runs), and over the "
        "window `lent` and `borrowed` instance-seconds and hours per share and type, "
        "`reclaims_triggered`, `reclaims_suffered` and the work lost to them."
    ),
)


class ShareViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ServiceViewSet):
    """Shares. Everyone signed in reads; admins create, change and delete them."""

    serializer_class = ShareSerializer
    filterset_fields = ["queue", "team", "policy", "enabled"]

    def get_queryset(self) -> QuerySet[Any]:
        return share_selectors.shares()

    @extend_schema(
        request=ShareWriteSerializer, responses={201: ShareSerializer, **ERROR_RESPONSES}
    )
    def create(self, request: Request) -> Response:
        share = self.call(
            ShareWriteSerializer,
            lambda data: share_services.share_create(
                actor=request.user,
                queue=data.get("queue"),
                team=data.get("team"),
                name=data.get("name", ""),
                limits=data.get("limits"),
                policy=data.get("policy", Policy.RESERVE),
                borrow_limit=data.get("borrow_limit"),
                in_share_preemption=data.get("in_share_preemption", False),
                preemption_retries=data.get("preemption_retries"),
                enabled=data.get("enabled", True),
                borrow_requires_verified_recovery=data.get(
                    "borrow_requires_verified_recovery", False
                ),
                certified_only=data.get("certified_only", False),
                reason=data.get("reason", ""),
            ),
            partial=False,
        )
        return Response(self.output(share), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=ShareUpdateSerializer,
        responses={200: ShareSerializer, 409: CONFLICT_RESPONSE, **ERROR_RESPONSES},
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        share = self.get_object()
        share = self.call(
            ShareUpdateSerializer,
            lambda changes: share_services.share_update(
                actor=request.user,
                share=share,
                version=changes.get("version"),
                changes={k: v for k, v in changes.items() if k not in ("version", "reason")},
                reason=changes.get("reason", ""),
            ),
            partial=True,
        )
        return Response(self.output(share))

    @extend_schema(
        parameters=[
            OpenApiParameter("reason", str, description="Why, for the audit trail (optional).")
        ],
        responses={204: None, **ERROR_RESPONSES},
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        share = self.get_object()
        reason = request.query_params.get("reason", "")
        if isinstance(request.data, dict):
            reason = request.data.get("reason", reason) or reason
        share_services.share_delete(actor=request.user, share=share, reason=str(reason))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=ShareWriteSerializer,
        responses={200: PreviewSerializer, **ERROR_RESPONSES},
        description=(
            "What saving these fields would do at the next cycle: running jobs it would "
            "preempt, running jobs that would sit beyond the new limit (open to reclaim) and "
            "pending jobs that would start. Nothing is saved. Admins only."
        ),
    )
    @action(detail=True, methods=["post"])
    def preview(self, request: Request, pk: str | None = None) -> Response:
        share = self.get_object()
        changes = self.parse(ShareWriteSerializer, partial=True)
        changes.pop("reason", None)
        return Response(
            scheduling.preview_share_change(actor=request.user, share=share, proposed=changes)
        )

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "from", str, description="Window start, ISO 8601 (default: a day ago)."
            ),
            OpenApiParameter("to", str, description="Window end, ISO 8601 (default: now)."),
        ],
        responses={200: LEDGER_RESPONSE, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["get"])
    def ledger(self, request: Request, pk: str | None = None) -> Response:
        """Who uses this share's idle entitlement and whose it uses, now and over a window;
        what its pending jobs would reclaim now. Everyone signed in reads it."""
        share = self.get_object()
        window = parse_window(request.query_params)
        return Response(scheduling.share_ledger(share, window.start, window.stop))
