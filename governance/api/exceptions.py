"""Priority exceptions API (docs/data-model.md): list, file, read; approve/reject/withdraw."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import call_service, path_id
from governance.api.idempotency import idempotent
from governance.models import PriorityException
from governance.selectors import exceptions as exception_selectors
from governance.selectors.filters import ExceptionFilter
from governance.services import exceptions as exception_services


class PriorityExceptionSerializer(serializers.ModelSerializer):
    requester = serializers.CharField(source="requester.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = PriorityException
        fields = [
            "id",
            "team",
            "job",
            "share",
            "priority",
            "justification",
            "wanted_by",
            "expires_at",
            "state",
            "requester",
            "decided_by",
            "decided_at",
            "decision_note",
            "previous_priority",
            "created_at",
        ]
        read_only_fields = fields


class ExceptionFileSerializer(serializers.Serializer):
    """Parses field types only; ``services.exceptions.exception_file`` checks the rules."""

    team = serializers.IntegerField()
    job = serializers.IntegerField(required=False, allow_null=True, default=None)
    share = serializers.IntegerField(required=False, allow_null=True, default=None)
    priority = serializers.IntegerField()
    justification = serializers.CharField(allow_blank=True)
    wanted_by = serializers.DateTimeField(required=False, allow_null=True, default=None)
    expires_at = serializers.DateTimeField()


class NoteSerializer(serializers.Serializer):
    note = serializers.CharField(required=False, allow_blank=True, default="")


class PriorityExceptionViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Everyone signed in reads; the exception service decides who may file and decide."""

    serializer_class = PriorityExceptionSerializer
    filterset_class = ExceptionFilter

    def get_queryset(self) -> QuerySet[PriorityException]:
        return exception_selectors.exceptions()

    def _pk(self) -> int:
        return path_id(self.kwargs.get("pk"), "exception")

    def _show(self, exc_id: int, code: int = status.HTTP_200_OK) -> Response:
        exc = exception_selectors.exceptions().get(pk=exc_id)
        return Response(PriorityExceptionSerializer(exc).data, status=code)

    @extend_schema(request=ExceptionFileSerializer, responses={201: PriorityExceptionSerializer})
    @idempotent
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        exc = call_service(
            ExceptionFileSerializer,
            request.data,
            lambda data: exception_services.exception_file(
                actor=request.user,
                team=data["team"],
                job=data["job"],
                share=data["share"],
                priority=data["priority"],
                justification=data["justification"],
                wanted_by=data["wanted_by"],
                expires_at=data["expires_at"],
            ),
        )
        return self._show(exc.pk, status.HTTP_201_CREATED)

    def _decide(self, request: Request, service: Callable[..., PriorityException]) -> Response:
        exc_id = self._pk()
        call_service(
            NoteSerializer,
            request.data,
            lambda data: service(actor=request.user, exception=exc_id, note=data["note"]),
        )
        return self._show(exc_id)

    @extend_schema(request=NoteSerializer, responses={200: PriorityExceptionSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve a pending exception (reviewers and admins; never the requester)."""
        return self._decide(request, exception_services.exception_approve)

    @extend_schema(request=NoteSerializer, responses={200: PriorityExceptionSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject a pending exception (reviewers and admins; never the requester)."""
        return self._decide(request, exception_services.exception_reject)

    @extend_schema(request=NoteSerializer, responses={200: PriorityExceptionSerializer})
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str | None = None) -> Response:
        """Withdraw a pending or approved exception (its requester or an admin)."""
        return self._decide(request, exception_services.exception_withdraw)
