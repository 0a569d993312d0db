"""Decisions API (docs/workloads.md#decisions): list and read; resubmit, reclassify or
close an open one. Everyone signed in reads; the services decide who may answer."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import StorableJSONField, call_service, path_id
from governance.api.exceptions import NoteSerializer
from governance.api.idempotency import idempotent
from governance.models import Decision
from governance.selectors import decisions as decision_selectors
from governance.selectors.filters import DecisionFilter
from governance.services import decisions as decision_services
from governance.services import resubmissions


class DecisionSerializer(serializers.ModelSerializer):
    job_name = serializers.CharField(source="job.name", read_only=True)
    workload = serializers.IntegerField(source="job.workload_id", read_only=True, allow_null=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True, default=None
    )
    overdue = serializers.SerializerMethodField(help_text="open and past its due time")

    class Meta:
        model = Decision
        fields = [
            "id",
            "job",
            "job_name",
            "team",
            "workload",
            "state",
            "opened_at",
            "due_at",
            "overdue",
            "decided_at",
            "decided_by",
            "note",
            "resubmitted_job",
        ]
        read_only_fields = fields

    def get_overdue(self, decision: Decision) -> bool:
        return decision_selectors.overdue(decision, self.context.get("now"))


class ResubmitSerializer(serializers.Serializer):
    """Parses field types only; the job service checks the copy like any submission.
    Fields left out are the failed job's."""

    name = serializers.CharField(required=False, allow_blank=True)
    priority = serializers.IntegerField(required=False)
    preferences = StorableJSONField(required=False)
    count = serializers.IntegerField(required=False, allow_null=True)
    max_pending = serializers.IntegerField(required=False, allow_null=True)
    checkpoint_interval = serializers.IntegerField(required=False, allow_null=True)
    duration = serializers.IntegerField(required=False, allow_null=True)
    may_borrow = serializers.BooleanField(required=False)
    preemptible = serializers.BooleanField(required=False)
    deadline = serializers.DateTimeField(required=False, allow_null=True)
    max_cost = serializers.DecimalField(
        max_digits=20, decimal_places=4, required=False, allow_null=True
    )
    note = serializers.CharField(required=False, allow_blank=True, default="")


class CloseSerializer(serializers.Serializer):
    reason = serializers.CharField(allow_blank=True, help_text="why the work is not run again")


class DecisionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = DecisionSerializer
    filterset_class = DecisionFilter

    def get_queryset(self) -> QuerySet[Decision]:
        return decision_selectors.decisions()

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "now": timezone.now()}

    def _show(self, decision_id: int) -> Response:
        decision = decision_selectors.decisions().get(pk=decision_id)
        return Response(
            DecisionSerializer(decision, context=self.get_serializer_context()).data,
            status=status.HTTP_200_OK,
        )

    def _pk(self) -> int:
        return path_id(self.kwargs.get("pk"), "decision")

    @extend_schema(request=ResubmitSerializer, responses={200: DecisionSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def resubmit(self, request: Request, pk: str | None = None) -> Response:
        """Submit a copy of the failed job (fields given replace the job's); the new job
        is ``resubmitted_job``. The team's leads and admins."""
        decision_id = self._pk()

        def answer(data: dict[str, Any]) -> Decision:
            note = data.pop("note", "")
            return resubmissions.decision_resubmit(
                actor=request.user, decision=decision_id, changes=data, note=note
            )

        call_service(ResubmitSerializer, request.data, answer)
        return self._show(decision_id)

    @extend_schema(request=NoteSerializer, responses={200: DecisionSerializer})
    @action(detail=True, methods=["post"])
    def reclassify(self, request: Request, pk: str | None = None) -> Response:
        """Make the failed job's workload ``protected``. The team's leads and admins."""
        decision_id = self._pk()
        call_service(
            NoteSerializer,
            request.data,
            lambda data: decision_services.decision_reclassify(
                actor=request.user, decision=decision_id, note=data["note"]
            ),
        )
        return self._show(decision_id)

    @extend_schema(request=CloseSerializer, responses={200: DecisionSerializer})
    @action(detail=True, methods=["post"])
    def close(self, request: Request, pk: str | None = None) -> Response:
        """Close without running the work again; a reason is required. The team's leads
        and admins."""
        decision_id = self._pk()
        call_service(
            CloseSerializer,
            request.data,
            lambda data: decision_services.decision_close(
                actor=request.user, decision=decision_id, reason=data["reason"]
            ),
        )
        return self._show(decision_id)
