"""``POST /api/auth/token/``: username and password for an expiring API token.

The answer keeps the contract (``{"token": ...}``, then ``Authorization: Token <token>``)
and adds ``expiry``. Sign-ins here count for django-axes's lockout exactly like the web
form's, and are throttled per address.
"""

from __future__ import annotations

from typing import Any

from axes.exceptions import AxesBackendPermissionDenied
from django.contrib.auth import authenticate, get_user_model, user_logged_in
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from governance.api.common import ErrorBodySerializer
from governance.api.throttles import AnonThrottle, SignInThrottle
from governance.guards import lockout_message
from governance.services import tokens
from governance.services.limits import MAX_PASSWORD_LENGTH, column_length


class TokenIn(serializers.Serializer[Any]):
    username = serializers.CharField(max_length=column_length(get_user_model(), "username"))
    password = serializers.CharField(
        max_length=MAX_PASSWORD_LENGTH, trim_whitespace=False, style={"input_type": "password"}
    )


class TokenOut(serializers.Serializer[Any]):
    token = serializers.CharField(help_text="send as `Authorization: Token <token>`")
    expiry = serializers.DateTimeField(help_text="after this the token no longer works")


class ObtainTokenView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes = [SignInThrottle, AnonThrottle]
    throttle_scope = "sign_in"

    @extend_schema(
        request=TokenIn,
        responses={
            200: TokenOut,
            400: OpenApiResponse(ErrorBodySerializer, description="Wrong username or password."),
            429: OpenApiResponse(
                ErrorBodySerializer, description="Locked out or too many attempts."
            ),
        },
        tags=["auth"],
        auth=[],
    )
    def post(self, request: Request) -> Response:
        """A new API token for this username and password (it expires; see ``expiry``)."""
        data = TokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            user = authenticate(
                request._request,
                username=data.validated_data["username"],
                password=data.validated_data["password"],
            )
        except AxesBackendPermissionDenied:
            return Response({"detail": [lockout_message()]}, status=429)
        if user is None or not user.is_active:
            return Response(
                {"non_field_errors": ["Unable to sign in with the username and password given."]},
                status=400,
            )
        # A success resets django-axes's failure count and records last_login, as the
        # web sign-in does.
        user_logged_in.send(sender=user.__class__, request=request._request, user=user)
        instance, token = tokens.token_create(actor=user, via="sign-in endpoint")
        return Response({"token": token, "expiry": instance.expiry})
