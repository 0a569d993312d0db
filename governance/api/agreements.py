"""Allocation agreements API: list (``?search=``), create, read, PATCH (with the
agreement's promises), ``evaluate`` its promises now and record a ``review``
(docs/agreements.md)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import call_service, path_id
from governance.api.idempotency import idempotent
from governance.models import Agreement, AgreementVersion, Promise
from governance.selectors import agreements as agreement_selectors
from governance.services import agreements as agreement_services
from governance.services import promises as promise_services
from governance.services.errors import NotFound, ValidationFailed

HISTORY_DEFAULT = 90
HISTORY_MAX = 1000


class PromiseInSerializer(serializers.Serializer):
    """A promise as written: a figure, a share or a team (on a queue), a comparison, a
    threshold and a window. Types only; ``services.promises`` checks the rules."""

    figure = serializers.CharField(help_text="a signal by its path, e.g. goodput")
    share = serializers.IntegerField(required=False, allow_null=True, default=None)
    team = serializers.IntegerField(required=False, allow_null=True, default=None)
    queue = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="for a team whose shares of the agreement are on several queues",
    )
    comparison = serializers.ChoiceField(choices=promise_services.COMPARISONS)
    threshold = serializers.FloatField()
    window_days = serializers.IntegerField(help_text=f"1 to {promise_services.MAX_WINDOW_DAYS}")


class PromiseEvaluationSerializer(serializers.Serializer):
    window_start = serializers.DateTimeField()
    window_stop = serializers.DateTimeField()
    value = serializers.FloatField(allow_null=True)
    state = serializers.CharField()
    evaluated_at = serializers.DateTimeField()


class PromiseHistorySerializer(serializers.Serializer):
    promise = serializers.IntegerField()
    figure = serializers.CharField()
    removed_in_version = serializers.IntegerField(allow_null=True)
    evaluations = PromiseEvaluationSerializer(many=True, help_text="oldest first")


@extend_schema_field(PromiseInSerializer(many=True))
class PromiseListField(serializers.ListField):
    """Promises as objects; the service checks each field, so a problem is named
    ``promises[i].FIELD``."""

    child = serializers.DictField()


class PromiseSerializer(serializers.ModelSerializer):
    state = serializers.CharField(help_text="kept, broken, no_data, or empty before the first")
    jobs = serializers.SerializerMethodField(help_text="the jobs behind the last evaluation")

    class Meta:
        model = Promise
        fields = [
            "id",
            "figure",
            "share",
            "team",
            "queue",
            "comparison",
            "threshold",
            "window_days",
            "added_in_version",
            "state",
            "value",
            "evaluated_at",
            "window_start",
            "window_stop",
            "jobs",
        ]
        read_only_fields = fields

    def get_jobs(self, promise: Promise) -> str:
        return agreement_selectors.promise_link(promise)


class PromiseSnapshotSerializer(serializers.Serializer):
    figure = serializers.CharField()
    share = serializers.IntegerField(allow_null=True)
    team = serializers.IntegerField(allow_null=True)
    queue = serializers.IntegerField()
    comparison = serializers.CharField()
    threshold = serializers.FloatField()
    window_days = serializers.IntegerField()


class AgreementVersionSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    edited_by = serializers.CharField(
        source="edited_by.username", read_only=True, allow_null=True, default=None
    )
    shares = serializers.ListField(
        source="share_ids", child=serializers.IntegerField(), read_only=True
    )
    promises = PromiseSnapshotSerializer(many=True, read_only=True)

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
            "promises",
            "review",
        ]
        read_only_fields = fields


class AgreementSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    editors: Any = serializers.SlugRelatedField(slug_field="username", many=True, read_only=True)
    versions = AgreementVersionSerializer(many=True, read_only=True)
    promises = PromiseSerializer(many=True, read_only=True, source="promises_in_force")

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
            "promises",
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
    promises = PromiseListField(required=False, default=list)
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
    promises = PromiseListField(
        required=False, help_text="the whole list: promises left out are withdrawn"
    )


class AgreementReviewSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    note = serializers.CharField(allow_blank=True, help_text="what the review found")
    review_by = serializers.DateField(
        required=False, allow_null=True, default=None, help_text="the next review date"
    )


class AgreementEvaluateSerializer(serializers.Serializer):
    """No body."""


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
        return path_id(self.kwargs.get("pk"), "agreement")

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

    @extend_schema(request=AgreementReviewSerializer, responses={200: AgreementSerializer})
    @action(detail=True, methods=["post"])
    def review(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Record a review: a new version, even unchanged, with its note."""
        agreement_id = self._pk()
        call_service(
            AgreementReviewSerializer,
            request.data,
            lambda data: agreement_services.agreement_review(
                actor=request.user, agreement=agreement_id, **data
            ),
        )
        return self._show(agreement_id)

    @extend_schema(request=AgreementEvaluateSerializer, responses={200: AgreementSerializer})
    @action(detail=True, methods=["post"])
    def evaluate(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Evaluate the agreement's promises now, each over its window ending now."""
        agreement_id = self._pk()
        agreement_services.agreement_evaluate(actor=request.user, agreement=agreement_id)
        return self._show(agreement_id)

    @extend_schema(
        request=None,
        responses={200: PromiseHistorySerializer(many=True)},
        parameters=[
            OpenApiParameter(
                "limit",
                int,
                description=f"evaluations per promise, newest kept (1 to {HISTORY_MAX})",
            )
        ],
    )
    # One list of every promise, never paginated (its ``limit`` is per promise).
    @action(detail=True, methods=["get"], pagination_class=None)
    def history(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Every promise the agreement has held (withdrawn ones too) with its evaluations."""
        agreement_id = self._pk()
        if not Agreement.objects.filter(pk=agreement_id).exists():
            raise NotFound({"detail": [f"No agreement with id {agreement_id}."]})
        raw = request.query_params.get("limit", str(HISTORY_DEFAULT))
        if not raw.isdecimal() or not 1 <= int(raw) <= HISTORY_MAX:
            raise ValidationFailed({"limit": [f"A whole number from 1 to {HISTORY_MAX}."]})
        promises = list(Promise.objects.filter(agreement_id=agreement_id).order_by("id"))
        history = agreement_selectors.promise_history([p.pk for p in promises], limit=int(raw))
        rows = [
            {
                "promise": p.pk,
                "figure": p.figure,
                "removed_in_version": p.removed_in_version,
                "evaluations": history[p.pk],
            }
            for p in promises
        ]
        return Response(PromiseHistorySerializer(rows, many=True).data)
