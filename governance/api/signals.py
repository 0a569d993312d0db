"""``/api/signals/`` (DESIGN 8), ``/api/signals/chargeback/`` and
``/api/queues/{id}/history/``: figures read from the recorded history; everyone signed in
reads them. ``?format=csv`` gives a flat table (one row per group, nested keys joined with
dots; chargeback one row per team, queue, type and month)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from governance.api.common import ERROR_RESPONSES
from governance.models import JobQueue
from governance.selectors import scheduling
from governance.selectors.windows import parse_group_by, parse_month, parse_window
from governance.services.errors import ValidationFailed
from governance.services.limits import valid_id


class CSVRenderer(renderers.BaseRenderer):
    """Lets ``?format=csv`` through content negotiation; views write the body themselves
    (error bodies are rendered as JSON text)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        return json.dumps(data).encode()


def csv_response(rows: list[dict[str, Any]], filename: str) -> HttpResponse:
    out = io.StringIO()
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def queue_param(value: Any) -> JobQueue:
    """The ``queue`` query parameter: a queue id."""
    if value in (None, ""):
        raise ValidationFailed({"queue": ["Required: the id of a queue."]})
    key = int(value) if isinstance(value, str) and value.isdigit() and len(value) < 19 else None
    if key is None or not valid_id(key):
        raise ValidationFailed({"queue": ["Must be the id of a queue (a positive integer)."]})
    queue = JobQueue.objects.filter(pk=key).first()
    if queue is None:
        raise ValidationFailed({"queue": [f"No queue with id {key}."]})
    return queue


WINDOW_PARAMETERS = [
    OpenApiParameter("from", OpenApiTypes.DATETIME, description="window start (ISO 8601)"),
    OpenApiParameter(
        "to",
        OpenApiTypes.DATETIME,
        description="window end, excluded (ISO 8601; default now; at most 31 days after from)",
    ),
]
FORMAT_PARAMETER = OpenApiParameter(
    "format", str, enum=["json", "csv"], description="csv: a flat table"
)


class SignalsView(APIView):
    """Every signal of DESIGN 8 for one queue over ``[from, to)``, per share or team."""

    renderer_classes = [renderers.JSONRenderer, CSVRenderer]

    @extend_schema(
        operation_id="signals",
        parameters=[
            OpenApiParameter("queue", int, required=True, description="queue id"),
            *WINDOW_PARAMETERS,
            OpenApiParameter("group_by", str, enum=["share", "team"]),
            FORMAT_PARAMETER,
        ],
        responses={
            (200, "application/json"): OpenApiResponse(
                OpenApiTypes.OBJECT,
                description='{"window": {"from", "to"}, "queue": {...}, "groups": [...]}',
            ),
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="a flat table"),
            **ERROR_RESPONSES,
        },
    )
    def get(self, request: Request) -> Any:
        params = request.query_params
        queue = queue_param(params.get("queue"))
        window = parse_window(params)
        group_by = parse_group_by(params.get("group_by"))
        answer = scheduling.queue_signals(queue, window.start, window.stop, group_by=group_by)
        if params.get("format") == "csv":
            return csv_response(scheduling.signals_rows(answer), f"signals-{queue.name}.csv")
        return Response(answer)


class ChargebackView(APIView):
    """Cost per team and month, split own / borrowed, over every queue."""

    renderer_classes = [renderers.JSONRenderer, CSVRenderer]

    @extend_schema(
        operation_id="signals_chargeback",
        parameters=[
            OpenApiParameter("month", str, description="YYYY-MM (default: this month)"),
            FORMAT_PARAMETER,
        ],
        responses={
            (200, "application/json"): OpenApiResponse(
                OpenApiTypes.OBJECT,
                description='{"month", "rows": [{"team", "queue", "instance_type", '
                '"own_instance_seconds", "borrowed_instance_seconds", "own_cost", '
                '"borrowed_cost", "total_cost"}]}',
            ),
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="the rows"),
            **ERROR_RESPONSES,
        },
    )
    def get(self, request: Request) -> Any:
        month = parse_month(request.query_params.get("month"))
        rows = scheduling.chargeback(month.start, month.stop)
        if request.query_params.get("format") == "csv":
            label = month.start.strftime("%Y-%m")
            return csv_response(rows, f"chargeback-{label}.csv")
        return Response({"month": month.start.strftime("%Y-%m"), "rows": rows})


class QueueHistoryView(APIView):
    """The queue's recorded history over ``[from, to)`` as a replayable scenario."""

    renderer_classes = [renderers.JSONRenderer]

    @extend_schema(
        operation_id="queues_history",
        parameters=WINDOW_PARAMETERS,
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT, description='{"scenario", "recorded", "teams"}'
            ),
            **ERROR_RESPONSES,
        },
    )
    def get(self, request: Request, pk: int) -> Any:
        queue = JobQueue.objects.filter(pk=pk).first() if valid_id(pk) else None
        if queue is None:
            return Response({"detail": ["No such queue."]}, status=404)
        window = parse_window(request.query_params)
        return Response(scheduling.queue_history(queue, window.start, window.stop))
