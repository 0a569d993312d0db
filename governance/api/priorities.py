"""``/api/priority-definitions/``: org-wide priority bands. Admins write (and delete)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import ERROR_RESPONSES, ServiceViewSet, StringListField
from governance.models import PriorityDefinition
from governance.models.priorities import BandRole
from governance.selectors import priorities as priority_selectors
from governance.services import priorities as priority_services


class PriorityDefinitionSerializer(serializers.ModelSerializer):
    usable_by = serializers.ListField(child=serializers.ChoiceField(choices=BandRole.choices))
    exception_owner = serializers.SerializerMethodField()

    class Meta:
        model = PriorityDefinition
        fields = [
            "id",
            "name",
            "min_priority",
            "max_priority",
            "criteria",
            "usable_by",
            "exception_owner",
        ]

    @extend_schema_field({"type": "string", "nullable": True})
    def get_exception_owner(self, definition: PriorityDefinition) -> str | None:
        owner = definition.exception_owner
        return owner.get_username() if owner is not None else None


class PriorityDefinitionWriteSerializer(serializers.Serializer):
    """Input. ``usable_by`` lists roles (member, lead, reviewer, admin); ``exception_owner``
    is a username or null."""

    name = serializers.CharField(required=False, allow_blank=True)
    min_priority = serializers.IntegerField(required=False)
    max_priority = serializers.IntegerField(required=False)
    criteria = serializers.CharField(required=False, allow_blank=True)
    usable_by = StringListField(required=False)
    exception_owner = serializers.CharField(required=False, allow_null=True, allow_blank=True)
    reason = serializers.CharField(required=False, allow_blank=True)


class PriorityDefinitionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ServiceViewSet):
    """Priority bands, lowest first. Everyone signed in reads; admins write."""

    serializer_class = PriorityDefinitionSerializer

    def get_queryset(self) -> QuerySet[Any]:
        return priority_selectors.priority_definitions()

    @extend_schema(
        request=PriorityDefinitionWriteSerializer,
        responses={201: PriorityDefinitionSerializer, **ERROR_RESPONSES},
    )
    def create(self, request: Request) -> Response:
        definition = self.call(
            PriorityDefinitionWriteSerializer,
            lambda data: priority_services.priority_definition_create(
                actor=request.user,
                name=data.get("name", ""),
                min_priority=data.get("min_priority"),
                max_priority=data.get("max_priority"),
                criteria=data.get("criteria", ""),
                usable_by=data.get("usable_by", []),
                exception_owner=data.get("exception_owner"),
            ),
            partial=False,
        )
        return Response(self.output(definition), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=PriorityDefinitionWriteSerializer,
        responses={200: PriorityDefinitionSerializer, **ERROR_RESPONSES},
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        definition = self.get_object()
        definition = self.call(
            PriorityDefinitionWriteSerializer,
            lambda changes: priority_services.priority_definition_update(
                actor=request.user,
                definition=definition,
                changes={k: v for k, v in changes.items() if k != "reason"},
                reason=changes.get("reason", ""),
            ),
            partial=True,
        )
        return Response(self.output(definition))

    @extend_schema(responses={204: None, **ERROR_RESPONSES})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        definition = self.get_object()
        priority_services.priority_definition_delete(actor=request.user, definition=definition)
        return Response(status=status.HTTP_204_NO_CONTENT)
