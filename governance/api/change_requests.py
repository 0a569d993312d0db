"""``/api/change-requests/``: share change requests (docs/admin-guide.md).

A lead of the share's team files one (``share``, ``proposed`` share fields,
``justification``); the share editor's impact preview is stored with it (``preview``).
Admins approve (``note``, and ``confirm_version`` when the share changed since the
filing: 409 otherwise, with the share, what changed and the new preview under
``current``) or reject (``note`` required); the requester withdraws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import ERROR_RESPONSES, StorableJSONField, call_service, path_id
from governance.api.exceptions import NoteSerializer
from governance.api.idempotency import idempotent
from governance.models import ShareChangeRequest
from governance.selectors import change_requests as change_request_selectors
from governance.selectors.filters import ChangeRequestFilter
from governance.services import change_requests as change_request_services

PREVIEW_SCHEMA = {
    "type": "object",
    "description": "The share editor's preview: `preempted`, `reclaimable`, `started` "
    "(jobs with their rule) and `warnings` (`over_allocated`, `never_start`).",
}


@extend_schema_field(PREVIEW_SCHEMA)
class PreviewField(serializers.JSONField):
    """The stored impact preview."""


@extend_schema_field(
    {
        "type": "object",
        "description": "Share fields as PATCH /api/shares/{id}/ takes them: `limits`, "
        "`policy`, `borrow_limit`, `in_share_preemption`, `preemption_retries`, "
        "`borrow_requires_verified_recovery`, `certified_only`.",
        "example": {"limits": {"ml.g5.xlarge": 6}},
    }
)
class ProposedField(StorableJSONField):
    """The proposed share fields; the service checks names and values."""


class ChangeRequestSerializer(serializers.ModelSerializer):
    share_name = serializers.CharField(source="share.name", read_only=True)
    queue = serializers.IntegerField(source="share.queue_id", read_only=True)
    requester = serializers.CharField(source="requester.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True, default=None
    )
    proposed = ProposedField(read_only=True)
    base = serializers.JSONField(read_only=True, help_text="The share when it was filed.")
    preview = PreviewField(read_only=True)
    decision_preview = PreviewField(read_only=True, allow_null=True)

    class Meta:
        model = ShareChangeRequest
        fields = [
            "id",
            "share",
            "share_name",
            "queue",
            "team",
            "requester",
            "proposed",
            "justification",
            "base",
            "base_version",
            "preview",
            "state",
            "decided_by",
            "decided_at",
            "decision_note",
            "decision_preview",
            "applied_version",
            "created_at",
        ]
        read_only_fields = fields


class ChangeRequestFileSerializer(serializers.Serializer):
    """Parses field types only; ``services.change_requests.change_request_file`` checks
    the rules."""

    share = serializers.IntegerField()
    proposed = ProposedField()
    justification = serializers.CharField(allow_blank=True)


class ApproveSerializer(NoteSerializer):
    confirm_version = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The share's current version, when it changed since the filing.",
    )


APPROVE_CONFLICT = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description='The share changed since the filing: {"confirm_version": ["..."], '
    '"current": {"share", "changed_since_filing", "preview"}}. Nothing was changed.',
)


class ChangeRequestViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Everyone signed in reads; the service decides who may file, decide and withdraw."""

    serializer_class = ChangeRequestSerializer
    filterset_class = ChangeRequestFilter

    def get_queryset(self) -> QuerySet[ShareChangeRequest]:
        return change_request_selectors.change_requests()

    def _pk(self) -> int:
        return path_id(self.kwargs.get("pk"), "change request")

    def _show(self, cr_id: int, code: int = status.HTTP_200_OK) -> Response:
        cr = change_request_selectors.change_requests().get(pk=cr_id)
        return Response(ChangeRequestSerializer(cr).data, status=code)

    @extend_schema(
        request=ChangeRequestFileSerializer,
        responses={201: ChangeRequestSerializer, **ERROR_RESPONSES},
    )
    @idempotent
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        cr = call_service(
            ChangeRequestFileSerializer,
            request.data,
            lambda data: change_request_services.change_request_file(
                actor=request.user,
                share=data["share"],
                changes=data["proposed"],
                justification=data["justification"],
            ),
        )
        return self._show(cr.pk, status.HTTP_201_CREATED)

    def _decide(
        self,
        request: Request,
        serializer: type[serializers.Serializer],
        service: Callable[..., ShareChangeRequest],
    ) -> Response:
        cr_id = self._pk()
        call_service(
            serializer,
            request.data,
            lambda data: service(actor=request.user, request=cr_id, **data),
        )
        return self._show(cr_id)

    @extend_schema(
        request=ApproveSerializer,
        responses={200: ChangeRequestSerializer, 409: APPROVE_CONFLICT, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve a pending request: its fields are saved to the share (admins; never
        the requester)."""
        return self._decide(
            request, ApproveSerializer, change_request_services.change_request_approve
        )

    @extend_schema(
        request=NoteSerializer, responses={200: ChangeRequestSerializer, **ERROR_RESPONSES}
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject a pending request with a reason in ``note`` (admins; never the requester)."""
        return self._decide(request, NoteSerializer, change_request_services.change_request_reject)

    @extend_schema(
        request=NoteSerializer, responses={200: ChangeRequestSerializer, **ERROR_RESPONSES}
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str | None = None) -> Response:
        """Withdraw a pending request (its requester)."""
        return self._decide(
            request, NoteSerializer, change_request_services.change_request_withdraw
        )
