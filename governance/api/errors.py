"""Turns service errors into docs/data-model.md error bodies: ``{"field": ["message"]}``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from governance.services.errors import Conflict, ServiceError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        body: dict[str, Any] = dict(exc.errors)
        if isinstance(exc, Conflict) and exc.current is not None:
            body["current"] = exc.current
        return Response(body, status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": [str(exc) or "The body is too large."]}, status=413)
    if isinstance(exc, SuspiciousOperation):  # too many fields, a bad multipart body...
        return Response({"detail": [str(exc) or "Malformed request."]}, status=400)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(response.data, dict) and "detail" in response.data:
        # Keep DRF's auth/permission/404 messages but in the field-keyed shape.
        detail = response.data["detail"]
        response.data = {"detail": detail if isinstance(detail, list) else [str(detail)]}
    elif isinstance(response.data, list):
        response.data = {"non_field_errors": response.data}
    return response
