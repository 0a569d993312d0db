"""Allocation agreements API (DESIGN section 7): list (``?search=``), create, read, PATCH."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import call_service
from governance.api.idempotency import idempotent
from governance.models import Agreement, AgreementVersion
from governance.selectors import agreements as agreement_selectors
from governance.services import agreements as agreement_services
from governance.services.errors import NotFound


class AgreementVersionSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    edited_by = serializers.CharField(
        source="edited_by.username", read_only=True, allow_null=True, default=None
    )
    shares = serializers.ListField(
        source="share_ids", child=serializers.IntegerField(), read_only=True
    )

    class Meta:
        model = AgreementVersion
        fields = [
            "version",
            "title",
            "body",
            "shares",
            "reclaim_assumptions",
            "recovery_assumptions",
            "owner",
            "review_by",
            "edited_by",
            "edited_at",
            "reason",
        ]
        read_only_fields = fields


class AgreementSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    editors: Any = serializers.SlugRelatedField(slug_field="username", many=True, read_only=True)
    versions = AgreementVersionSerializer(many=True, read_only=True)

    class Meta:
        model = Agreement
        fields = [
            "id",
            "title",
            "body",
            "shares",
            "reclaim_assumptions",
            "recovery_assumptions",
            "owner",
            "editors",
            "review_by",
            "version",
            "versions",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class AgreementCreateSerializer(serializers.Serializer):
    """Parses field types only; ``services.agreements`` checks the rules."""

    title = serializers.CharField(allow_blank=True)
    body = serializers.CharField(required=False, allow_blank=True, default="")
    shares = serializers.ListField(child=serializers.IntegerField(), required=False, default=list)
    reclaim_assumptions = serializers.CharField(required=False, allow_blank=True, default="")
    recovery_assumptions = serializers.CharField(required=False, allow_blank=True, default="")
    owner = serializers.CharField(required=False, allow_null=True, default=None)
    editors = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    review_by = serializers.DateField(required=False, allow_null=True, default=None)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class AgreementPatchSerializer(serializers.Serializer):
    """Every field optional except ``version`` (the one read; stale -> 409)."""

    version = serializers.IntegerField()
    reason = serializers.CharField(required=False, allow_blank=True, default="")
    title = serializers.CharField(required=False, allow_blank=True)
    body = serializers.CharField(required=False, allow_blank=True)
    shares = serializers.ListField(child=serializers.IntegerField(), required=False)
    reclaim_assumptions = serializers.CharField(required=False, allow_blank=True)
    recovery_assumptions = serializers.CharField(required=False, allow_blank=True)
    owner = serializers.CharField(required=False, allow_null=True)
    editors = serializers.ListField(child=serializers.CharField(), required=False)
    review_by = serializers.DateField(required=False, allow_null=True)


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter(
                "search",
                str,
                description="Full-text search over title (weighs most), body and the "
                "reclaim and recovery assumptions; web-search syntax; best match first.",
            )
        ]
    )
)
class AgreementViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Everyone signed in reads; the agreement service decides who may write."""

    serializer_class = AgreementSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[Agreement]:
        queryset = agreement_selectors.agreements()
        text = self.request.query_params.get("search", "").strip()
        if self.action == "list" and text:
            return agreement_selectors.search_agreements(text, queryset)
        return queryset

    def _pk(self) -> int:
        raw = str(self.kwargs.get("pk", ""))
        if not raw.isdigit():
            raise NotFound({"detail": [f"No agreement with id {raw}."]})
        return int(raw)

    def _show(self, agreement_id: int, code: int = status.HTTP_200_OK) -> Response:
        agreement = agreement_selectors.agreements().get(pk=agreement_id)
        return Response(AgreementSerializer(agreement).data, status=code)

    @extend_schema(request=AgreementCreateSerializer, responses={201: AgreementSerializer})
    @idempotent
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        agreement = call_service(
            AgreementCreateSerializer,
            request.data,
            lambda data: agreement_services.agreement_create(actor=request.user, **data),
        )
        return self._show(agreement.pk, status.HTTP_201_CREATED)

    @extend_schema(request=AgreementPatchSerializer, responses={200: AgreementSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        agreement_id = self._pk()
        call_service(
            AgreementPatchSerializer,
            request.data,
            lambda data: agreement_services.agreement_update(
                actor=request.user, agreement=agreement_id, **data
            ),
        )
        return self._show(agreement_id)
