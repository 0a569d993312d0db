"""``/api/plans/``: capacity plans (docs/scheduling.md#capacity-plans). Everyone signed in reads;
admins create them, change their ``count`` (PATCH, with a ``reason``) and end them early
(``POST /api/plans/{id}/end/`` with a ``reason``). Filters: ``queue``, ``share``,
``team``, ``instance_type``, ``state`` (``upcoming``, ``active``, ``ended``).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import ERROR_RESPONSES, ServiceViewSet, call_service
from governance.models import CapacityPlan, JobQueue, PlanState, Share
from governance.selectors import plans as plan_selectors
from governance.selectors.filters import PlanFilter
from governance.services import plans as plan_services


class PlanSerializer(serializers.ModelSerializer):
    instance_type = serializers.CharField(source="instance_type.name", read_only=True)
    hourly_price = serializers.DecimalField(max_digits=10, decimal_places=4, coerce_to_string=False)
    state = serializers.SerializerMethodField(help_text="upcoming, active or ended, now")
    share_name = serializers.CharField(source="share.name", read_only=True)
    usage = serializers.SerializerMethodField(
        help_text="Instances the plan's running jobs hold now."
    )

    class Meta:
        model = CapacityPlan
        fields = [
            "id",
            "queue",
            "share",
            "share_name",
            "name",
            "instance_type",
            "count",
            "start",
            "end",
            "hourly_price",
            "state",
            "usage",
            "ended_at",
        ]

    def get_state(self, plan: CapacityPlan) -> str:
        return str(plan.state_at(timezone.now()).value)

    def get_usage(self, plan: CapacityPlan) -> int:
        usage: dict[int, int] | None = self.context.get("plan_usage")
        if usage is None:
            usage = plan_selectors.usage_by_plan([plan.pk])
        return usage.get(plan.pk, 0)


class PlanWriteSerializer(serializers.Serializer):
    """Input for POST. ``hourly_price`` is per instance-hour (default 0)."""

    queue = serializers.PrimaryKeyRelatedField(queryset=JobQueue.objects.all(), required=False)
    share = serializers.PrimaryKeyRelatedField(queryset=Share.objects.all(), required=False)
    name = serializers.CharField(required=False, allow_blank=True)
    instance_type = serializers.CharField(required=False, allow_blank=True)
    count = serializers.IntegerField(required=False)
    start = serializers.DateTimeField(required=False)
    end = serializers.DateTimeField(required=False)
    hourly_price = serializers.DecimalField(max_digits=20, decimal_places=4, required=False)
    reason = serializers.CharField(required=False, allow_blank=True)


class PlanUpdateSerializer(serializers.Serializer):
    """Input for PATCH: the new ``count`` and why (the audit trail keeps the reason)."""

    count = serializers.IntegerField(required=False)
    reason = serializers.CharField(required=False, allow_blank=True)


class PlanEndSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True)


class PlanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ServiceViewSet):
    """Capacity plans. Everyone signed in reads; admins create, resize and end them."""

    serializer_class = PlanSerializer
    filterset_class = PlanFilter

    def get_queryset(self) -> QuerySet[Any]:
        return plan_selectors.plans().order_by("queue__name", "start", "name", "id")

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        page = getattr(self, "_page_ids", None)
        if page is not None:
            context["plan_usage"] = plan_selectors.usage_by_plan(page)
        return context

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = list(page if page is not None else queryset)
        self._page_ids = [plan.pk for plan in rows]
        data = self.get_serializer(rows, many=True).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    @extend_schema(request=PlanWriteSerializer, responses={201: PlanSerializer, **ERROR_RESPONSES})
    def create(self, request: Request) -> Response:
        plan = self.call(
            PlanWriteSerializer,
            lambda data: plan_services.plan_create(
                actor=request.user,
                queue=data.get("queue"),
                share=data.get("share"),
                name=data.get("name", ""),
                instance_type=data.get("instance_type"),
                count=data.get("count"),
                start=data.get("start"),
                end=data.get("end"),
                hourly_price=data.get("hourly_price"),
                reason=data.get("reason", ""),
            ),
            partial=False,
        )
        return Response(self.output(plan), status=status.HTTP_201_CREATED)

    @extend_schema(request=PlanUpdateSerializer, responses={200: PlanSerializer, **ERROR_RESPONSES})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        plan = self.get_object()
        plan = self.call(
            PlanUpdateSerializer,
            lambda changes: plan_services.plan_update(
                actor=request.user, plan=plan, changes=changes
            ),
            partial=True,
        )
        return Response(self.output(plan))

    @extend_schema(
        request=PlanEndSerializer,
        responses={200: PlanSerializer, **ERROR_RESPONSES},
        description=(
            "End an active plan now: jobs still running on it are stopped at the next "
            "cycle (reason plan_ended, not counted against retries) and may start on "
            "their other preferences. Admins only; give a reason."
        ),
    )
    @action(detail=True, methods=["post"])
    def end(self, request: Request, pk: str | None = None) -> Response:
        plan = self.get_object()
        plan = call_service(
            PlanEndSerializer,
            request.data,
            lambda data: plan_services.plan_end(
                actor=request.user, plan=plan, reason=data.get("reason", "")
            ),
        )
        return Response(self.output(plan))


__all__ = ["PlanState", "PlanViewSet"]
