"""Small helpers shared by the API modules: JSON-shaped fields, error responses, a base
viewset whose writes go through one service call.

Serializers here only parse and shape; every rule lives in the services, so a value of
the wrong shape inside a map or list (``limits``, ``leads``...) is reported by the
service with a message naming the field, not as a nested DRF error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.fields import SkipField, empty
from rest_framework.request import Request

from governance.guards import json_value_problem
from governance.services.errors import NotFound, PermissionDenied, ServiceError

log = logging.getLogger(__name__)
T = TypeVar("T")


class StorableJSONField(serializers.JSONField):
    """DRF's JSON field, held to what the API's JSON parser holds a body to.

    A form or multipart body carries a JSON field as text, which DRF decodes here, after
    every parser: its strings and keys must be storable text too (no NUL, no lone
    surrogate: PostgreSQL refuses them, a 500 otherwise) and its nesting bounded as a
    JSON body's field is, one level below ``MAX_JSON_DEPTH`` (deeper, the decoder ran out
    of stack). Only writable fields need it: a read-only one decodes nothing."""

    def to_internal_value(self, data: Any) -> Any:
        depth = settings.MAX_JSON_DEPTH - 1  # as ``SafeJSONParser`` bounds a body's field
        try:
            value = super().to_internal_value(data)
        except RecursionError:
            raise ValidationError(f"is nested deeper than {depth} levels") from None
        problem = json_value_problem(value, depth)
        if problem:
            raise ValidationError(problem)
        return value


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class StringListField(StorableJSONField):
    """A JSON list of strings (usernames, roles); the service checks its content."""


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0},
        "example": {"ml.g5.xlarge": 2},
    }
)
class CountMapField(StorableJSONField):
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
        """The request body parsed by ``serializer_class`` (types only) as a dict.

        For a write, prefer ``call_service``: a type error here hides the service's rule
        errors about the other fields.
        """
        serializer = serializer_class(data=self.request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def call(
        self,
        serializer_class: type[serializers.Serializer],
        service: Callable[[Any], T],
        *,
        partial: bool,
    ) -> T:
        """``call_service`` on this request's body."""
        return call_service(serializer_class, self.request.data, service, partial=partial)

    def output(self, instance: Any) -> Any:
        """The object re-read through the selector queryset, shaped for the response."""
        fresh = self.get_queryset().get(pk=instance.pk)
        return self.get_serializer(fresh).data


_kept = threading.local()


def represent(
    serializer_class: type[serializers.BaseSerializer], instance: Any, context: dict[str, Any]
) -> dict[str, Any]:
    """What ``serializer_class(instance, context=context).data`` gives, from a serializer
    whose fields are built once per thread.

    A ModelSerializer builds, copies and binds its whole field tree for every instance it
    is made for: 0.9 ms of CPU for a job with its events and Slurm runs, a tenth of a
    submission's. The fields keep nothing of what they show, and read the context from
    the root serializer at each use, so one serializer per class and thread can serve
    request after request with its context set anew. It is taken out of the thread's
    keeping while in use, so a nested use of the same class, or one that fails half-way,
    never shares it or leaves another request's context on it.
    """
    kept: dict[type[serializers.BaseSerializer], Any] = _kept.__dict__.setdefault("by_class", {})
    serializer = kept.pop(serializer_class, None)
    if serializer is None:
        serializer = serializer_class(context={})
    serializer._context = context
    data: dict[str, Any] = serializer.to_representation(instance)
    # Kept again only when it succeeded: one that failed half-way is dropped.
    serializer._context = {}
    kept[serializer_class] = serializer
    return data


def path_id(raw: object, what: str) -> int:
    """An id from a URL path: decimal digits of bounded length, else 404 naming ``what``
    (``int()`` would take other Unicode digits, and a huge number the database would
    refuse)."""
    text = str(raw or "")
    if not text.isdecimal() or len(text) > 12:
        raise NotFound({"detail": [f"No {what} with id {text}."]})
    return int(text)


def actor_of(request: Request) -> Any:
    return request.user


class _Rollback(Exception):
    """Undoes a probing service call that passed its checks."""


def _probe(service: Callable[[Any], Any], values: dict[str, Any]) -> ServiceError | None:
    """Run ``service`` on ``values`` and undo whatever it wrote; return what it refused.

    Nothing leaves the transaction: writes, audit entries and the scheduling requests
    services queue for the commit are all rolled back.
    """
    try:
        with transaction.atomic():
            service(values)
            raise _Rollback
    except _Rollback:
        return None
    except ServiceError as refusal:
        return refusal
    except Exception:  # the placeholders of unreadable fields can trip it: no more to say
        log.debug("probe of %s failed", service, exc_info=True)
        return None


def _parsed(
    serializer_class: type[serializers.Serializer], data: Any, partial: bool
) -> dict[str, Any] | None:
    """``data`` parsed as ``serializer_class(data=data, partial=partial).is_valid()``
    parses it, by a serializer kept per thread (as ``represent`` keeps one: building the
    fields of a request's parser was a tenth of a submission's web CPU); None when it
    does not parse, and the caller builds a fresh one to say every problem."""
    kept: dict[tuple[type, bool], Any] = _kept.__dict__.setdefault("parsers", {})
    serializer = kept.pop((serializer_class, partial), None)
    if serializer is None:
        serializer = serializer_class(partial=partial)
    try:
        values = serializer.run_validation(data)
    except ValidationError:
        values = None
    # Validation leaves nothing on the serializer: it is kept even when data was refused.
    kept[(serializer_class, partial)] = serializer
    return dict(values) if values is not None else None


def call_service(
    serializer_class: type[serializers.Serializer],
    data: Any,
    service: Callable[[Any], T],
    *,
    partial: bool = False,
    errors: Mapping[str, list[str]] | None = None,
) -> T:
    """Parse ``data`` and call ``service`` with the parsed fields: every problem at once.

    When some fields cannot be read (a string for an integer, a body that is not an
    object) or ``errors`` names edge problems, the service still runs on the fields that
    could be read (unreadable ones are None, or left out of a partial update) inside a
    transaction that is rolled back, so the 400 names the rule errors of the other fields
    too, and a caller who may not act at all gets the service's 403 or 404 first.
    """
    if not errors:
        parsed = _parsed(serializer_class, data, partial)
        if parsed is not None:
            return service(parsed)
    serializer = serializer_class(data=data, partial=partial)
    if serializer.is_valid() and not errors:
        return service(dict(serializer.validated_data))
    found: dict[str, list[str]] = {}
    if isinstance(serializer.errors, Mapping):
        found.update({key: list(value) for key, value in serializer.errors.items()})
    for key, messages in (errors or {}).items():
        found.setdefault(key, []).extend(messages)
    source = data if isinstance(data, Mapping) else {}
    values: dict[str, Any] = {}
    for name, field in serializer.fields.items():
        if field.read_only:
            continue
        if name in found:
            if not partial:
                values[name] = None
            continue
        try:
            values[name] = field.run_validation(field.get_value(source))
        except SkipField:
            continue
        except ValidationError:
            if not partial and field.get_value(source) is empty:
                values[name] = None
    refusal = _probe(service, values)
    if isinstance(refusal, PermissionDenied | NotFound):
        raise refusal
    if refusal is not None:
        for key, messages in refusal.errors.items():
            if key not in found:
                found[key] = messages
    raise ValidationError(found)
