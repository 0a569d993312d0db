"""``/api/signals/`` (docs/signals.md), ``/api/signals/chargeback/`` and
``/api/queues/{id}/history/``: figures read from the recorded history; everyone signed in
reads them. ``?format=csv`` gives a flat table (one row per group, nested keys joined with
dots; chargeback one row per team, queue, type and month)."""

from __future__ import annotations

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
from governance.api.tables import csv_text
from governance.models import JobQueue, WhatIf
from governance.selectors import scheduling
from governance.selectors.windows import parse_group_by, parse_month, parse_window
from governance.services import whatif as whatif_services
from governance.services.errors import NotFound, ValidationFailed
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
    response = HttpResponse(csv_text(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def queue_param(value: Any) -> JobQueue:
    """The ``queue`` query parameter: a queue id."""
    if value in (None, ""):
        raise ValidationFailed({"queue": ["Required: the id of a queue."]})
    key = int(value) if isinstance(value, str) and value.isdecimal() and len(value) < 19 else None
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
    """Every signal of docs/signals.md for one queue over ``[from, to)``, per share or team."""

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
                OpenApiTypes.OBJECT,
                description='{"scenario", "recorded": {"events", "jobs"}, "teams", "decisions"}',
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


def whatif_json(run: WhatIf, *, with_result: bool = True) -> dict[str, Any]:
    return {
        "id": run.pk,
        "queue": run.queue_id,
        "from": run.window_start.isoformat(),
        "to": run.window_stop.isoformat(),
        "proposal": run.proposal,
        "state": run.state,
        "progress": run.progress,
        "step": run.step,
        "error": run.error,
        "agreement": run.agreement_id,
        "attached_at": run.attached_at.isoformat() if run.attached_at else None,
        "created_at": run.created_at.isoformat(),
        "page": f"/whatif/{run.pk}/",
        **({"result": run.result} if with_result else {}),
    }


def _queue_or_404(pk: int) -> JobQueue:
    queue = JobQueue.objects.filter(pk=pk).first() if valid_id(pk) else None
    if queue is None:
        raise NotFound({"detail": ["No such queue."]})
    return queue


def _run_or_404(queue: JobQueue, pk: int) -> WhatIf:
    run = WhatIf.objects.filter(pk=pk, queue=queue).first() if valid_id(pk) else None
    if run is None:
        raise NotFound({"detail": ["No such what-if for this queue."]})
    return run


WHATIF_BODY = OpenApiTypes.OBJECT


class WhatIfListView(APIView):
    """``POST``: run a what-if on the queue's window (admins and team leads); ``GET``: the
    queue's latest what-ifs (without their results)."""

    renderer_classes = [renderers.JSONRenderer]

    @extend_schema(
        operation_id="queues_whatif_list",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **ERROR_RESPONSES},
    )
    def get(self, request: Request, pk: int) -> Any:
        queue = _queue_or_404(pk)
        runs = WhatIf.objects.filter(queue=queue).order_by("-created_at", "-id")[:50]
        return Response({"results": [whatif_json(r, with_result=False) for r in runs]})

    @extend_schema(
        operation_id="queues_whatif_create",
        request=WHATIF_BODY,
        responses={
            202: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description='The run: {"id", "state", "progress", "page", ...}; GET it for '
                "the result.",
            ),
            **ERROR_RESPONSES,
            429: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="You already have WHATIF_MAX_PER_USER runs queued or running: "
                '{"detail": ["..."]}.',
            ),
        },
        description='Body: {"from": ISO, "to": ISO, "baseline": "strict_partitions" | "pooled" '
        "(optional: every share RESERVE, or every share LEND_AND_BORROW with borrow limit -1, "
        'the share edits laid over it), "shares": {NAME: {policy, borrow_limit, limits, '
        'in_share_preemption, preemption_retries}}, "capacity": {TYPE: count}}. The result '
        "judges every promise of the agreements on the queue's shares on both sides.",
    )
    def post(self, request: Request, pk: int) -> Any:
        queue = _queue_or_404(pk)
        body = request.data if isinstance(request.data, dict) else {}
        window = parse_window({"from": body.get("from"), "to": body.get("to")})
        run = whatif_services.whatif_request(
            actor=request.user,
            queue=queue,
            start=window.start,
            stop=window.stop,
            proposal={
                "baseline": body.get("baseline"),
                "shares": body.get("shares"),
                "capacity": body.get("capacity"),
            },
        )
        return Response(whatif_json(run), status=202)


class WhatIfDetailView(APIView):
    """One what-if: its progress, and when done its result (the window's recorded
    signals, both replayed sides' signals and the per-share differences)."""

    renderer_classes = [renderers.JSONRenderer]

    @extend_schema(
        operation_id="queues_whatif_retrieve",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **ERROR_RESPONSES},
    )
    def get(self, request: Request, pk: int, run_id: int) -> Any:
        return Response(whatif_json(_run_or_404(_queue_or_404(pk), run_id)))


class WhatIfAttachView(APIView):
    """Attach a finished what-if to an allocation agreement as evidence."""

    renderer_classes = [renderers.JSONRenderer]

    @extend_schema(
        operation_id="queues_whatif_attach",
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **ERROR_RESPONSES},
        description='Body: {"agreement": ID}.',
    )
    def post(self, request: Request, pk: int, run_id: int) -> Any:
        run = _run_or_404(_queue_or_404(pk), run_id)
        body = request.data if isinstance(request.data, dict) else {}
        agreement = body.get("agreement")
        if agreement is None or not valid_id(agreement):
            raise ValidationFailed({"agreement": ["Required: the id of an agreement."]})
        run = whatif_services.whatif_attach(actor=request.user, whatif=run, agreement=agreement)
        return Response(whatif_json(run, with_result=False))
