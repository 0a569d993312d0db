"""The Slurm completion hook (docs/slurm.md): a node epilog tells the product that a Slurm
job ended, and the product decides what runs next before the epilog releases the node.

Not a user's API: the caller is Slurm's epilog, which holds the shared secret
``SLURM_HOOK_TOKEN`` (``Authorization: Bearer <token>``); with no token set the hook is off
and every call is refused. The view is thin: it checks the token and calls the service.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from governance.services import slurm as slurm_services

log = logging.getLogger(__name__)


class HoldsHookToken(BasePermission):
    message = "the Slurm completion hook needs 'Authorization: Bearer <SLURM_HOOK_TOKEN>'"

    def has_permission(self, request: Request, view: Any) -> bool:
        token = settings.SLURM_HOOK_TOKEN
        if not token:
            self.message = "the Slurm completion hook is off (SLURM_HOOK_TOKEN is not set)"
            return False
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), token.encode()
        )


class JobEndedIn(serializers.Serializer[Any]):
    slurm_job_id = serializers.IntegerField(min_value=1, max_value=slurm_services.MAX_SLURM_JOB_ID)


class PassOut(serializers.Serializer[Any]):
    skipped = serializers.CharField(help_text="why no pass ran (empty when one ran)")
    paused = serializers.BooleanField(help_text="Slurm could not be reached")
    completed = serializers.IntegerField()
    failed = serializers.IntegerField()
    lost = serializers.IntegerField()
    stopped = serializers.IntegerField()
    started = serializers.IntegerField()
    submitted = serializers.IntegerField()
    reported = serializers.ListField(
        child=serializers.IntegerField(),
        help_text=(
            "the Slurm jobs whose end the pass that recorded this job's recorded too: "
            "the epilogs of those jobs need not call"
        ),
    )


class JobEndedOut(serializers.Serializer[Any]):
    known = serializers.BooleanField(help_text="the job carried a run of a queue run by Slurm")
    queue = serializers.IntegerField(allow_null=True)
    executor_pass = PassOut(
        allow_null=True,
        help_text="what the pass did; null when the job is unknown (or no scheduler runs here)",
    )


class JobEndedView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [HoldsHookToken]
    throttle_classes: list[Any] = []  # the token holder is the cluster's own epilog

    @extend_schema(
        request=JobEndedIn,
        responses=JobEndedOut,
        summary="A Slurm job ended (the node epilog's completion hook)",
        description=(
            "Runs the executor pass of the queue whose run the job carried, before the "
            "epilog releases the job's nodes. Authenticated by `Authorization: Bearer "
            "<SLURM_HOOK_TOKEN>`, not by a user's token."
        ),
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, Mapping) else {}
        rest: list[Callable[[], None]] = []
        answer = slurm_services.slurm_job_ended(
            slurm_job_id=data.get("slurm_job_id"), defer=rest.append
        )
        return AnsweredFirst(answer, then=rest)


class AnsweredFirst(Response):
    """A response that runs ``then`` once it has been sent (the WSGI server closes it after
    the last byte): the epilog waiting for the hook's answer lets its node go while the
    pass records what it did."""

    def __init__(self, data: Any, *, then: list[Callable[[], None]]) -> None:
        super().__init__(data)
        self._then = then

    def close(self) -> None:
        try:
            for step in self._then:
                try:
                    step()
                except Exception:  # the answer is out: log it, the next pass catches up
                    log.exception("the end of a completion hook's pass failed")
        finally:
            super().close()
