"""Small helpers shared by the API modules: JSON-shaped fields, error responses, a base
viewset whose writes go through one service call.

Serializers here only parse and shape; every rule lives in the services, so a value of
the wrong shape inside a map or list (``limits``, ``leads``...) is reported by the
service with a message naming the field, not as a nested DRF error.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers, viewsets
from rest_framework.request import Request


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class StringListField(serializers.JSONField):
    """A JSON list of strings (usernames, roles); the service checks its content."""


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0},
        "example": {"ml.g5.xlarge": 2},
    }
)
class CountMapField(serializers.JSONField):
    """A JSON map of instance type name to count; the service checks names and counts."""


class ErrorBodySerializer(serializers.Serializer):
    """``{"field": ["message", ...]}``: one key per field in error (``detail`` otherwise)."""

    detail = serializers.ListField(child=serializers.CharField(), required=False)


ERROR_RESPONSES: dict[int, OpenApiResponse] = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description='{"field": ["message", ...]}'),
    403: OpenApiResponse(ErrorBodySerializer, description="Not allowed for your role."),
    404: OpenApiResponse(ErrorBodySerializer, description="No such object."),
}

CONFLICT_RESPONSE = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description=(
        'Stale version: {"version": ["..."], "current": {...the stored object...}}. '
        "Nothing was changed; review `current` and send the change again with its version."
    ),
)


class ServiceViewSet(viewsets.GenericViewSet):
    """Reads use the selector queryset; writes parse input then call one service.

    PUT is not offered: the contract is PATCH with only the fields to change.
    """

    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def parse(self, serializer_class: type[serializers.Serializer], *, partial: bool) -> Any:
        """The request body parsed by ``serializer_class`` (types only) as a dict."""
        serializer = serializer_class(data=self.request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def output(self, instance: Any) -> Any:
        """The object re-read through the selector queryset, shaped for the response."""
        fresh = self.get_queryset().get(pk=instance.pk)
        return self.get_serializer(fresh).data


def actor_of(request: Request) -> Any:
    return request.user
