"""``/api/notifications/``: the signed-in person's notifications and preferences."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import ERROR_RESPONSES
from governance.models import Notification, NotificationKind, NotificationPreference
from governance.selectors import notifications as selectors
from governance.services import notifications as services
from governance.services.limits import DB_BIGINT_MAX, column_length


class NotificationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "kind", "title", "body", "url", "created_at", "read_at"]
        read_only_fields = fields


class ReadSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=DB_BIGINT_MAX),
        required=False,
        allow_null=True,
        default=None,
        max_length=services.MAX_READ_IDS,
        help_text="the notifications to mark read; omit for all of them",
    )


class PreferencesSerializer(serializers.Serializer):
    email_kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=NotificationKind.choices),
        required=False,
        max_length=len(NotificationKind.choices),
    )
    webhook_kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=NotificationKind.choices),
        required=False,
        max_length=len(NotificationKind.choices),
    )
    webhook_url = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=column_length(NotificationPreference, "webhook_url"),
    )


class NotificationViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """What the product told you (newest first), and how you want to be told."""

    serializer_class = NotificationSerializer
    filterset_fields: list[str] = []

    def get_queryset(self) -> QuerySet[Any]:
        return selectors.notifications_of(self.request.user)

    @extend_schema(request=ReadSerializer, responses={200: None, **ERROR_RESPONSES})
    @action(detail=False, methods=["post"])
    def read(self, request: Request) -> Response:
        """Mark notifications read: ``ids``, or all of them."""
        data = ReadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        count = services.notifications_mark_read(actor=request.user, ids=data.validated_data["ids"])
        return Response({"marked": count})

    @extend_schema(methods=["GET"], responses={200: PreferencesSerializer, **ERROR_RESPONSES})
    @extend_schema(
        methods=["PATCH"],
        request=PreferencesSerializer,
        responses={200: PreferencesSerializer, **ERROR_RESPONSES},
    )
    @action(detail=False, methods=["get", "patch"])
    def preferences(self, request: Request) -> Response:
        """Which kinds reach you by email and by webhook (in the app: all of them)."""
        if request.method == "PATCH":
            data = PreferencesSerializer(data=request.data, partial=True)
            data.is_valid(raise_exception=True)
            pref = services.notification_preferences_update(
                actor=request.user, **data.validated_data
            )
            return Response(services.preference_snapshot(pref))
        return Response(services.preference_snapshot(selectors.preference_of(request.user)))
