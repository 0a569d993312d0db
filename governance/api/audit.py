"""Audit trail API (docs/data-model.md): read-only, reviewers and admins only.

``?format=csv`` and ``?format=json`` download every matching entry (not one page),
streamed from the database. DRF reads ``format`` for content negotiation, so the view
offers a CSV renderer (``format=csv`` or ``Accept: text/csv``) and treats an explicit
``?format=json`` as the download of a JSON array; without ``format`` the list is the
usual paginated JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, renderers, serializers, viewsets
from rest_framework.request import Request

from governance.api.tables import SafeWriter
from governance.models import AuditEntry
from governance.selectors import audit as audit_selectors
from governance.selectors.filters import AuditFilter

FIELDS = [
    "id",
    "event_type",
    "actor",
    "subject_type",
    "subject_id",
    "subject_repr",
    "team",
    "share",
    "job",
    "queue",
    "before",
    "after",
    "reason",
    "created_at",
]


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(
        source="actor.username", read_only=True, allow_null=True, default=None
    )
    team = serializers.IntegerField(source="team_id", read_only=True, allow_null=True)
    share = serializers.IntegerField(source="share_id", read_only=True, allow_null=True)
    job = serializers.IntegerField(source="job_id", read_only=True, allow_null=True)
    queue = serializers.IntegerField(source="queue_id", read_only=True, allow_null=True)

    class Meta:
        model = AuditEntry
        fields = FIELDS
        read_only_fields = fields


class AuditCSVRenderer(renderers.BaseRenderer):
    """Lets ``?format=csv`` (and ``Accept: text/csv``) through content negotiation; the
    view streams the body itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        # Only reached for error bodies (403, 400): render them as JSON text.
        return json.dumps(data).encode()


class _Echo:
    """A file-like object whose write returns the line, for csv.writer streaming."""

    def write(self, value: str) -> str:
        return value


def _row(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "event_type": entry.event_type,
        "actor": entry.actor.get_username() if entry.actor is not None else None,
        "subject_type": entry.subject_type,
        "subject_id": entry.subject_id,
        "subject_repr": entry.subject_repr,
        "team": entry.team_id,
        "share": entry.share_id,
        "job": entry.job_id,
        "queue": entry.queue_id,
        "before": entry.before,
        "after": entry.after,
        "reason": entry.reason,
        "created_at": entry.created_at.isoformat(),
    }


# The CSV is read by people in a spreadsheet: each id column is followed by the name it
# stands for (as named now; empty when the row is gone). The ids stay, to join on.
CSV_FIELDS = [
    name
    for field in FIELDS
    for name in ((field, f"{field}_name") if field in ("team", "share", "queue") else (field,))
]


def _csv_lines(queryset: QuerySet[AuditEntry]) -> Iterator[str]:
    writer = SafeWriter(_Echo())
    yield writer.writerow(CSV_FIELDS)
    # Teams, shares and queues are few (bounded in services/limits.py): one read each.
    names = audit_selectors.subject_names()
    for entry in queryset.iterator(chunk_size=1000):
        row = _row(entry)
        for key in ("before", "after"):
            row[key] = "" if row[key] is None else json.dumps(row[key], sort_keys=True)
        for key in ("team", "share", "queue"):
            row[f"{key}_name"] = names[key].get(row[key]) if row[key] is not None else None
        yield writer.writerow(row[f] for f in CSV_FIELDS)


def _json_chunks(queryset: QuerySet[AuditEntry]) -> Iterator[str]:
    yield "["
    first = True
    for entry in queryset.iterator(chunk_size=1000):
        yield ("" if first else ",\n") + json.dumps(_row(entry))
        first = False
    yield "]\n"


class AuditEntryViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The audit trail, newest first. Reviewers and admins only (others 403)."""

    serializer_class = AuditEntrySerializer
    filterset_class = AuditFilter
    renderer_classes = [renderers.JSONRenderer, renderers.BrowsableAPIRenderer, AuditCSVRenderer]

    def get_queryset(self) -> QuerySet[AuditEntry]:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return AuditEntry.objects.none()
        return audit_selectors.audit_entries(self.request.user)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "format",
                str,
                enum=["csv", "json"],
                description="Download every matching entry (not one page) as CSV or as a "
                "JSON array.",
            )
        ],
        responses={
            (200, "application/json"): AuditEntrySerializer(many=True),
            (200, "text/csv"): OpenApiResponse(
                response=OpenApiTypes.STR, description="Every matching entry as CSV."
            ),
        },
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        queryset = self.filter_queryset(self.get_queryset())
        wanted = request.query_params.get("format")
        if wanted == "csv" or (wanted is None and request.accepted_renderer.format == "csv"):
            response = StreamingHttpResponse(
                _csv_lines(queryset), content_type="text/csv; charset=utf-8"
            )
            response["Content-Disposition"] = 'attachment; filename="audit.csv"'
            return response
        if wanted == "json":
            response = StreamingHttpResponse(
                _json_chunks(queryset), content_type="application/json"
            )
            response["Content-Disposition"] = 'attachment; filename="audit.json"'
            return response
        page = self.paginate_queryset(queryset)
        serializer = self.get_serializer(page, many=True)
        return self.get_paginated_response(serializer.data)
