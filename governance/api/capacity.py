"""``/api/instance-types/`` and ``/api/queues/`` (with ``/{id}/usage/``). Admins write.

Instance types are looked up by name (``/api/instance-types/ml.g5.xlarge/``): names are
unique, never change, and are what every other field (capacity, limits, preferences)
uses to refer to a type.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import ERROR_RESPONSES, CountMapField, ServiceViewSet, StorableJSONField
from governance.models import InstanceType, JobQueue
from governance.models.capacity import Executor
from governance.models.slurm import SlurmQueueConfig
from governance.selectors import capacity as capacity_selectors
from governance.services import capacity as capacity_services
from governance.services import slurm as slurm_services
from governance.services.limits import MAX_REASON, column_length


class InstanceTypeSerializer(serializers.ModelSerializer):
    hourly_price = serializers.DecimalField(max_digits=10, decimal_places=4, coerce_to_string=False)

    class Meta:
        model = InstanceType
        fields = ["id", "name", "accelerated", "accelerators", "speed", "hourly_price"]


class InstanceTypeWriteSerializer(serializers.Serializer):
    """Input. ``accelerated`` defaults from the family (ml.p, ml.g, ml.trn) when omitted;
    ``reason`` goes to the audit trail."""

    name = serializers.CharField(required=False, allow_blank=True)
    accelerated = serializers.BooleanField(required=False)
    accelerators = serializers.IntegerField(required=False)
    speed = serializers.FloatField(required=False)
    hourly_price = serializers.DecimalField(max_digits=20, decimal_places=4, required=False)
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=MAX_REASON,
        help_text="Why, for the audit trail.",
    )


class InstanceTypeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ServiceViewSet):
    """Instance types, looked up by name. Everyone signed in reads; admins write."""

    serializer_class = InstanceTypeSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    filterset_fields = ["accelerated"]

    def get_queryset(self) -> QuerySet[Any]:
        return capacity_selectors.instance_types()

    @extend_schema(
        request=InstanceTypeWriteSerializer,
        responses={201: InstanceTypeSerializer, **ERROR_RESPONSES},
    )
    def create(self, request: Request) -> Response:
        itype = self.call(
            InstanceTypeWriteSerializer,
            lambda data: capacity_services.instance_type_create(
                actor=request.user,
                name=data.get("name", ""),
                accelerated=data.get("accelerated"),
                accelerators=data.get("accelerators", 0),
                speed=data.get("speed", 1.0),
                hourly_price=data.get("hourly_price", 0),
                reason=data.get("reason", ""),
            ),
            partial=False,
        )
        return Response(self.output(itype), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=InstanceTypeWriteSerializer,
        responses={200: InstanceTypeSerializer, **ERROR_RESPONSES},
    )
    def partial_update(self, request: Request, name: str | None = None) -> Response:
        itype = self.get_object()
        itype = self.call(
            InstanceTypeWriteSerializer,
            lambda changes: capacity_services.instance_type_update(
                actor=request.user,
                instance_type=itype,
                changes={k: v for k, v in changes.items() if k != "reason"},
                reason=changes.get("reason", ""),
            ),
            partial=True,
        )
        return Response(self.output(itype))


class QueueSerializer(serializers.ModelSerializer):
    capacity = serializers.SerializerMethodField()

    class Meta:
        model = JobQueue
        fields = ["id", "name", "description", "executor", "capacity"]

    @extend_schema_field(CountMapField)
    def get_capacity(self, queue: JobQueue) -> dict[str, int]:
        return capacity_selectors.capacity_of(queue)


class QueueWriteSerializer(serializers.Serializer):
    """Input. ``capacity`` replaces the whole map; ``reason`` goes to the audit trail."""

    name = serializers.CharField(required=False, allow_blank=True)
    description = serializers.CharField(required=False, allow_blank=True)
    executor = serializers.ChoiceField(choices=Executor.choices, required=False)
    capacity = CountMapField(required=False)
    reason = serializers.CharField(required=False, allow_blank=True, write_only=True)


class UsageRowSerializer(serializers.Serializer):
    instance_type = serializers.CharField()
    limit = serializers.IntegerField()
    usage = serializers.IntegerField()
    own = serializers.IntegerField()
    borrowed = serializers.IntegerField()
    lent = serializers.IntegerField()
    idle = serializers.IntegerField()
    pending = serializers.IntegerField()


class ShareUsageSerializer(serializers.Serializer):
    share = serializers.IntegerField()
    name = serializers.CharField()
    team = serializers.IntegerField()
    team_name = serializers.CharField()
    policy = serializers.CharField()
    enabled = serializers.BooleanField()
    types = UsageRowSerializer(many=True)


class TypeTotalsSerializer(serializers.Serializer):
    instance_type = serializers.CharField()
    capacity = serializers.IntegerField()
    limits = serializers.IntegerField()
    usage = serializers.IntegerField()
    borrowed = serializers.IntegerField()
    unowned = serializers.IntegerField()
    oversubscribed = serializers.BooleanField()


class PlanUsageSerializer(serializers.Serializer):
    """A capacity plan beside the queue's on-demand capacity (docs/scheduling.md#capacity-plans)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    share = serializers.IntegerField()
    share_name = serializers.CharField()
    instance_type = serializers.CharField()
    count = serializers.IntegerField()
    usage = serializers.IntegerField(help_text="instances its running jobs hold")
    pending = serializers.IntegerField(help_text="pending jobs whose first preference names it")
    state = serializers.CharField(help_text="upcoming, active or ended")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class QueueUsageSerializer(serializers.Serializer):
    queue = serializers.IntegerField()
    name = serializers.CharField()
    types = TypeTotalsSerializer(many=True, help_text="on-demand capacity per type")
    shares = ShareUsageSerializer(many=True, help_text="on-demand usage per share and type")
    plans = PlanUsageSerializer(
        many=True, help_text="capacity plans not ended (or ended within a day), apart"
    )


class SlurmTypeSerializer(serializers.Serializer):
    partition = serializers.CharField(allow_blank=True)
    feature = serializers.CharField(allow_blank=True)
    gpus_per_instance = serializers.IntegerField()
    gres_name = serializers.CharField()


class SlurmTeamSerializer(serializers.Serializer):
    user = serializers.CharField()
    account = serializers.CharField(allow_blank=True)
    qos = serializers.CharField(allow_blank=True)


class SlurmConfigSerializer(serializers.Serializer):
    """How a queue maps onto Slurm (docs/slurm.md), and the executor's health."""

    account = serializers.CharField(allow_blank=True)
    qos = serializers.CharField(allow_blank=True)
    grace_seconds = serializers.IntegerField()
    drift_report_only = serializers.BooleanField()
    types = serializers.DictField(child=SlurmTypeSerializer())
    teams = serializers.DictField(child=SlurmTeamSerializer())
    paused_since = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    failures = serializers.IntegerField()


class SlurmConfigWriteSerializer(serializers.Serializer):
    """Input: ``types`` replaces the whole map; ``reason`` goes to the audit trail."""

    account = serializers.CharField(
        required=False, allow_blank=True, max_length=column_length(SlurmQueueConfig, "account")
    )
    qos = serializers.CharField(
        required=False, allow_blank=True, max_length=column_length(SlurmQueueConfig, "qos")
    )
    grace_seconds = serializers.IntegerField(required=False)
    types = StorableJSONField(required=False)
    teams = StorableJSONField(required=False)
    drift_report_only = serializers.BooleanField(required=False)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=MAX_REASON)


class QueueViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ServiceViewSet):
    """Job queues and their capacity. Everyone signed in reads; admins write."""

    serializer_class = QueueSerializer
    filterset_fields = ["name", "executor"]

    def get_queryset(self) -> QuerySet[Any]:
        return capacity_selectors.queues()

    @extend_schema(
        request=QueueWriteSerializer, responses={201: QueueSerializer, **ERROR_RESPONSES}
    )
    def create(self, request: Request) -> Response:
        queue = self.call(
            QueueWriteSerializer,
            lambda data: capacity_services.queue_create(
                actor=request.user,
                name=data.get("name", ""),
                description=data.get("description", ""),
                executor=data.get("executor", Executor.SIMULATED),
                capacity=data.get("capacity") or {},
                reason=data.get("reason", ""),
            ),
            partial=False,
        )
        return Response(self.output(queue), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=QueueWriteSerializer, responses={200: QueueSerializer, **ERROR_RESPONSES}
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        queue = self.get_object()
        queue = self.call(
            QueueWriteSerializer,
            lambda changes: capacity_services.queue_update(
                actor=request.user,
                queue=queue,
                changes={k: v for k, v in changes.items() if k != "reason"},
                reason=changes.get("reason", ""),
            ),
            partial=True,
        )
        return Response(self.output(queue))

    @extend_schema(responses={200: SlurmConfigSerializer, **ERROR_RESPONSES})
    @action(detail=True, methods=["get"], filterset_fields=[], pagination_class=None)
    def slurm(self, request: Request, pk: str | None = None) -> Response:
        """How the queue maps onto Slurm, and whether the executor is paused (since when)."""
        queue = self.get_object()
        return Response(capacity_selectors.slurm_config(queue))

    @extend_schema(
        request=SlurmConfigWriteSerializer,
        responses={200: SlurmConfigSerializer, **ERROR_RESPONSES},
    )
    @slurm.mapping.patch
    def slurm_update(self, request: Request, pk: str | None = None) -> Response:
        """Set the queue's Slurm mapping (admins): account, QOS, grace, types, the teams'
        Unix users, whether the drift guard only reports."""
        queue = self.get_object()
        self.call(
            SlurmConfigWriteSerializer,
            lambda changes: slurm_services.slurm_config_set(
                actor=request.user,
                queue=queue,
                config={k: v for k, v in changes.items() if k != "reason"},
                reason=changes.get("reason", ""),
            ),
            partial=True,
        )
        return Response(capacity_selectors.slurm_config(queue))

    @extend_schema(responses={200: QueueUsageSerializer, **ERROR_RESPONSES})
    @action(detail=True, methods=["get"], filterset_fields=[], pagination_class=None)
    def usage(self, request: Request, pk: str | None = None) -> Response:
        """Per share and type: limit, usage, own, borrowed, lent, idle, pending (on-demand
        capacity); ``plans``: each capacity plan's count and usage, apart."""
        queue = self.get_object()
        return Response(capacity_selectors.queue_usage(queue))
