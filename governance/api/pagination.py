"""The API's one pagination: limit and offset, bounded (kept apart from ``common`` because
DRF imports it while loading its settings, before the viewsets can be imported)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

from governance.services.limits import DB_BIGINT_MAX


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """``?limit=`` and ``?offset=`` within bounds, or a 400 naming the parameter.

    DRF's own pagination ignores a limit it cannot read and sends any offset to the
    database, where one beyond ``bigint`` is a server error.
    """

    max_limit = 500

    def _bounded(self, request: Request, name: str, minimum: int, maximum: int) -> int | None:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return None
        if not raw.isdecimal() or not minimum <= int(raw) <= maximum:
            raise ValidationError({name: [f"must be an integer from {minimum} to {maximum}"]})
        return int(raw)

    def get_limit(self, request: Request) -> int | None:
        limit = self._bounded(request, self.limit_query_param, 1, self.max_limit)
        return self.default_limit if limit is None else limit

    def get_offset(self, request: Request) -> int:
        return self._bounded(request, self.offset_query_param, 0, DB_BIGINT_MAX) or 0

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: (1, self.max_limit),
            self.offset_query_param: (0, DB_BIGINT_MAX),
        }
        for parameter in parameters:
            if parameter["name"] in bounds:
                low, high = bounds[parameter["name"]]
                parameter["schema"] = {**parameter["schema"], "minimum": low, "maximum": high}
        return parameters
