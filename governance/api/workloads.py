"""``/api/workloads/``: a team's workloads (docs/workloads.md). Everyone signed in reads;
the team's leads and admins create them and change their ``name``, ``interruption`` and
``recovery_assumptions`` (PATCH). The recovery status follows resumed runs' outcomes;
each workload carries its history. Filters: ``team``, ``interruption``,
``recovery_status``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import (
    ERROR_RESPONSES,
    ServiceViewSet,
    StorableJSONField,
    call_service,
    path_id,
)
from governance.models import Interruption, RecoveryChange, Workload
from governance.selectors import certifications as cert_selectors
from governance.selectors import workloads as workload_selectors
from governance.selectors.filters import WorkloadFilter
from governance.services import templates as template_services
from governance.services import workloads as workload_services
from governance.services.errors import NotFound


class RecoveryChangeSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", read_only=True, allow_null=True)

    class Meta:
        model = RecoveryChange
        fields = ["at", "before", "after", "evidence_job", "note", "actor"]
        read_only_fields = fields


class WorkloadSerializer(serializers.ModelSerializer):
    team_name = serializers.CharField(source="team.name", read_only=True)

    class Meta:
        model = Workload
        fields = [
            "id",
            "team",
            "team_name",
            "name",
            "interruption",
            "recovery_assumptions",
            "recovery_status",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class WorkloadDetailSerializer(WorkloadSerializer):
    history = serializers.SerializerMethodField(
        help_text="recovery status changes, newest first, each with its evidence job"
    )

    class Meta(WorkloadSerializer.Meta):
        fields = [*WorkloadSerializer.Meta.fields, "history"]
        read_only_fields = fields

    @extend_schema_field(RecoveryChangeSerializer(many=True))
    def get_history(self, workload: Workload) -> list[dict[str, Any]]:
        rows = workload_selectors.history(workload.pk)
        return list(RecoveryChangeSerializer(rows, many=True).data)


class WorkloadWriteSerializer(serializers.Serializer):
    """Input for POST; every rule is checked by ``services.workloads``."""

    team = serializers.IntegerField(required=False, allow_null=True)
    name = serializers.CharField(required=False, allow_blank=True)
    interruption = serializers.CharField(required=False, default=Interruption.TOLERANT)
    recovery_assumptions = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="what a resume needs, how output is validated",
    )


class WorkloadUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, allow_blank=True)
    interruption = serializers.CharField(required=False)
    recovery_assumptions = serializers.CharField(required=False, allow_blank=True)
    recovery_status = serializers.CharField(
        required=False, help_text="read-only: refused, it follows resumed runs' outcomes"
    )


class TemplateEntrySerializer(serializers.Serializer):
    position = serializers.IntegerField(read_only=True, help_text="1 is the first choice")
    certification = serializers.IntegerField(help_text="id of a certified configuration")
    configuration = serializers.CharField(read_only=True)
    reason = serializers.CharField(help_text="why it stands in this place")


class TemplateSerializer(serializers.Serializer):
    """A workload's preference template (docs/workloads.md#preference-templates)."""

    entries = TemplateEntrySerializer(many=True)
    max_pending = serializers.IntegerField(allow_null=True, required=False, default=None)
    deadline_offset = serializers.IntegerField(
        allow_null=True, required=False, default=None, help_text="seconds from submission"
    )
    max_cost = serializers.DecimalField(
        max_digits=20, decimal_places=4, allow_null=True, required=False, default=None
    )


class TemplateWriteSerializer(serializers.Serializer):
    entries = StorableJSONField(
        help_text='[{"certification": id, "reason": "why it stands here"}], first choice first'
    )
    max_pending = serializers.IntegerField(allow_null=True, required=False, default=None)
    deadline_offset = serializers.IntegerField(allow_null=True, required=False, default=None)
    max_cost = serializers.DecimalField(
        max_digits=20, decimal_places=4, allow_null=True, required=False, default=None
    )


def template_data(workload_id: int) -> dict[str, Any]:
    template = cert_selectors.template_of(workload_id)
    if template is None:
        return {"entries": [], "max_pending": None, "deadline_offset": None, "max_cost": None}
    return {
        "entries": [
            {
                "position": e.position,
                "certification": e.certification_id,
                "configuration": e.certification.configuration,
                "reason": e.reason,
            }
            for e in template.entries.all()
        ],
        "max_pending": template.max_pending,
        "deadline_offset": template.deadline_offset,
        "max_cost": template.max_cost,
    }


class WorkloadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ServiceViewSet):
    """Workloads. Everyone signed in reads; a team's leads and admins write."""

    serializer_class = WorkloadSerializer
    filterset_class = WorkloadFilter

    def get_queryset(self) -> QuerySet[Any]:
        return workload_selectors.workloads().order_by("team__name", "name", "id")

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        if self.action == "retrieve":
            return WorkloadDetailSerializer
        return WorkloadSerializer

    @extend_schema(
        request=WorkloadWriteSerializer,
        responses={201: WorkloadDetailSerializer, **ERROR_RESPONSES},
    )
    def create(self, request: Request) -> Response:
        workload = self.call(
            WorkloadWriteSerializer,
            lambda data: workload_services.workload_create(
                actor=request.user,
                team=data.get("team"),
                name=data.get("name", ""),
                interruption=data.get("interruption"),
                recovery_assumptions=data.get("recovery_assumptions", ""),
            ),
            partial=False,
        )
        return Response(WorkloadDetailSerializer(workload).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=WorkloadUpdateSerializer,
        responses={200: WorkloadDetailSerializer, **ERROR_RESPONSES},
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()
        workload = self.call(
            WorkloadUpdateSerializer,
            lambda changes: workload_services.workload_update(
                actor=request.user, workload=workload, changes=changes
            ),
            partial=True,
        )
        return Response(WorkloadDetailSerializer(workload).data)

    @extend_schema(
        methods=["GET"], request=None, responses={200: TemplateSerializer, **ERROR_RESPONSES}
    )
    @extend_schema(
        methods=["POST"],
        request=TemplateWriteSerializer,
        responses={200: TemplateSerializer, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["get", "post"])
    def template(self, request: Request, pk: str | None = None) -> Response:
        """The workload's preference template; POST replaces it (the team's leads,
        admins): entries name certified, unexpired configurations of the workload."""
        workload_id = path_id(pk, "workload")
        if request.method == "POST":
            call_service(
                TemplateWriteSerializer,
                request.data,
                lambda data: template_services.template_set(
                    actor=request.user, workload=workload_id, **data
                ),
            )
        elif not workload_selectors.workloads().filter(pk=workload_id).exists():
            raise NotFound({"detail": [f"No workload with id {workload_id}."]})
        return Response(TemplateSerializer(template_data(workload_id)).data)
