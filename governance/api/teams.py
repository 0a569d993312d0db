"""``/api/teams/``: teams with their leads and members as usernames (admins write)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from governance.api.common import ERROR_RESPONSES, ServiceViewSet, StringListField
from governance.models import MembershipRole, Team
from governance.selectors import teams as team_selectors
from governance.services import teams as team_services
from governance.services.limits import MAX_REASON


class TeamSerializer(serializers.ModelSerializer):
    leads = serializers.SerializerMethodField()
    members = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["id", "name", "description", "leads", "members"]

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_leads(self, team: Team) -> list[str]:
        return team_selectors.usernames(team, MembershipRole.LEAD)

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_members(self, team: Team) -> list[str]:
        return team_selectors.usernames(team, MembershipRole.MEMBER)


class TeamWriteSerializer(serializers.Serializer):
    """Input: ``leads``/``members`` are usernames and replace the whole list; ``reason``
    goes to the audit trail."""

    name = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    description = serializers.CharField(required=False, allow_blank=True)
    leads = StringListField(required=False)
    members = StringListField(required=False)
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=MAX_REASON,
        help_text="Why, for the audit trail.",
    )


class TeamViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ServiceViewSet):
    """Teams. Everyone signed in reads; admins create and change them."""

    serializer_class = TeamSerializer
    filterset_fields = ["name"]

    def get_queryset(self) -> QuerySet[Any]:
        return team_selectors.teams()

    @extend_schema(request=TeamWriteSerializer, responses={201: TeamSerializer, **ERROR_RESPONSES})
    def create(self, request: Request) -> Response:
        team = self.call(
            TeamWriteSerializer,
            lambda data: team_services.team_create(
                actor=request.user,
                name=data.get("name", ""),
                description=data.get("description", ""),
                leads=data.get("leads") or [],
                members=data.get("members") or [],
                reason=data.get("reason", ""),
            ),
            partial=False,
        )
        return Response(self.output(team), status=status.HTTP_201_CREATED)

    @extend_schema(request=TeamWriteSerializer, responses={200: TeamSerializer, **ERROR_RESPONSES})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        team = self.get_object()
        team = self.call(
            TeamWriteSerializer,
            lambda changes: team_services.team_update(
                actor=request.user,
                team=team,
                changes={k: v for k, v in changes.items() if k != "reason"},
                reason=changes.get("reason", ""),
            ),
            partial=True,
        )
        return Response(self.output(team))
