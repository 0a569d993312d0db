"""``/api/certifications/``: certified configurations of workloads
(docs/workloads.md#certified-configurations). Everyone signed in reads; a lead of the
workload's team proposes (POST); a reviewer who did not propose it certifies or rejects
(``/certify/``, ``/reject/``, with a note); reviewers, admins and the team's leads revoke
(``/revoke/``, with a reason). Each carries its drift: the runs completed on it since it
was certified, actual run time over the certified one. Filters: ``workload``, ``state``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import django_filters
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import ERROR_RESPONSES, call_service, path_id
from governance.models import Certification, CertificationState
from governance.selectors import certifications as cert_selectors
from governance.services import certifications as cert_services


class CertificationFilter(django_filters.FilterSet):
    workload = django_filters.NumberFilter(field_name="workload_id")
    state = django_filters.ChoiceFilter(choices=CertificationState.choices)

    class Meta:
        model = Certification
        fields = ["workload", "state"]


class DriftSerializer(serializers.Serializer):
    p50 = serializers.FloatField(allow_null=True, help_text="actual / certified run time, p50")
    p90 = serializers.FloatField(allow_null=True)
    runs = serializers.IntegerField(help_text="runs completed on it since it was certified")
    drifting = serializers.BooleanField(help_text="p50 outside [1/1.2, 1.2] over >= 5 runs")


class CertificationSerializer(serializers.ModelSerializer):
    workload_name = serializers.CharField(source="workload.name", read_only=True)
    instance_type = serializers.CharField(
        source="instance_type.name", read_only=True, allow_null=True
    )
    plan = serializers.CharField(source="plan.name", read_only=True, allow_null=True)
    configuration = serializers.CharField(read_only=True)
    status = serializers.SerializerMethodField(
        help_text="the state, or expired for a certified one past its expiry"
    )
    proposed_by = serializers.CharField(
        source="proposed_by.username", read_only=True, allow_null=True
    )
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True
    )
    revoked_by = serializers.CharField(
        source="revoked_by.username", read_only=True, allow_null=True
    )
    drift = serializers.SerializerMethodField()

    class Meta:
        model = Certification
        fields = [
            "id",
            "workload",
            "workload_name",
            "instance_type",
            "plan",
            "count",
            "configuration",
            "runtime",
            "converged",
            "utilization",
            "failure_rate",
            "output_valid",
            "environment",
            "notes",
            "state",
            "status",
            "proposed_by",
            "proposed_at",
            "decided_by",
            "decided_at",
            "decision_note",
            "expires_at",
            "revoked_by",
            "revoked_at",
            "revoke_reason",
            "drift",
        ]
        read_only_fields = fields

    def get_status(self, cert: Certification) -> str:
        return cert.status(timezone.now())

    @extend_schema_field(DriftSerializer(allow_null=True))
    def get_drift(self, cert: Certification) -> dict[str, Any] | None:
        if cert.state == CertificationState.PROPOSED:
            return None
        # A page lists many configurations of few workloads: read each one's runs once.
        runs = cast(dict[str, Any], self.context).setdefault("runs_by_workload", {})
        if cert.workload_id not in runs:
            runs[cert.workload_id] = cert_selectors.completed_runs(cert.workload_id)
        return cert_selectors.drift_of(cert, runs[cert.workload_id])


class CertificationProposeSerializer(serializers.Serializer):
    """Types only; every rule is checked by ``services.certifications``."""

    workload = serializers.IntegerField()
    instance_type = serializers.CharField(required=False, allow_null=True, allow_blank=True)
    plan = serializers.CharField(required=False, allow_null=True, allow_blank=True)
    count = serializers.IntegerField()
    runtime = serializers.IntegerField(help_text="seconds of the workload's reference run")
    converged = serializers.BooleanField()
    utilization = serializers.DecimalField(max_digits=12, decimal_places=4, help_text="percent")
    failure_rate = serializers.DecimalField(max_digits=12, decimal_places=4, help_text="percent")
    output_valid = serializers.BooleanField()
    environment = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="the image or environment"
    )
    notes = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="convergence, validation"
    )


class DecisionSerializer(serializers.Serializer):
    note = serializers.CharField(required=False, allow_blank=True, default="")


class RevokeSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class CertificationViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Certified configurations; the certification service decides who may do what."""

    serializer_class = CertificationSerializer
    filterset_class = CertificationFilter
    http_method_names = ["get", "post", "head", "options"]

    def get_queryset(self) -> QuerySet[Certification]:
        return cert_selectors.certifications().order_by("workload_id", "proposed_at", "id")

    def _show(self, cert_id: int, code: int = status.HTTP_200_OK) -> Response:
        cert = cert_selectors.certifications().get(pk=cert_id)
        return Response(CertificationSerializer(cert).data, status=code)

    @extend_schema(
        request=CertificationProposeSerializer,
        responses={201: CertificationSerializer, **ERROR_RESPONSES},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Propose a configuration of a workload with its benchmark (the team's leads)."""
        cert = call_service(
            CertificationProposeSerializer,
            request.data,
            lambda data: cert_services.certification_propose(actor=request.user, **data),
        )
        return self._show(cert.pk, status.HTTP_201_CREATED)

    def _act(
        self, request: Request, parser: type[serializers.Serializer], call: Callable[..., Any]
    ) -> Response:
        cert_id = path_id(self.kwargs.get("pk"), "certification")
        call_service(parser, request.data, lambda data: call(cert_id, data))
        return self._show(cert_id)

    @extend_schema(request=DecisionSerializer, responses={200: CertificationSerializer})
    @action(detail=True, methods=["post"])
    def certify(self, request: Request, pk: str | None = None) -> Response:
        """Certify a proposed configuration (reviewers and admins, never its proposer)."""
        return self._act(
            request,
            DecisionSerializer,
            lambda cert_id, data: cert_services.certification_decide(
                actor=request.user, certification=cert_id, certify=True, note=data["note"]
            ),
        )

    @extend_schema(request=DecisionSerializer, responses={200: CertificationSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject a proposed configuration (reviewers and admins, never its proposer)."""
        return self._act(
            request,
            DecisionSerializer,
            lambda cert_id, data: cert_services.certification_decide(
                actor=request.user, certification=cert_id, certify=False, note=data["note"]
            ),
        )

    @extend_schema(request=RevokeSerializer, responses={200: CertificationSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        """Revoke a certified configuration, with a reason."""
        return self._act(
            request,
            RevokeSerializer,
            lambda cert_id, data: cert_services.certification_revoke(
                actor=request.user, certification=cert_id, reason=data["reason"]
            ),
        )
