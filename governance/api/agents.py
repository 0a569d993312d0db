"""The external agent protocol (docs/agents.md): claim, report, complete, stop orders.

An agent signs in with a token of a user in the ``agent`` group and serves one queue
whose executor is ``agent``; it acts only on runs that its credentials claimed
(``services.runs`` enforces it). Views are thin: they parse, check the role, call a
service or a selector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from governance import roles
from governance.models import Job
from governance.selectors import jobs as job_selectors
from governance.services import hooks, runs
from governance.services.errors import ValidationFailed
from governance.services.limits import DB_INT_MAX, MAX_SECONDS, column_length
from governance.services.runs import MAX_CLAIM

# The name an agent claims runs under: what ``Job.agent`` holds.
AGENT_MAX_LENGTH = column_length(Job, "agent")


class IsAgent(BasePermission):
    message = "only users in the 'agent' group may use the agent protocol"

    def has_permission(self, request: Request, view: Any) -> bool:
        return roles.is_agent(request.user)


class ClaimIn(serializers.Serializer[Any]):
    agent = serializers.CharField(max_length=AGENT_MAX_LENGTH)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_CLAIM, default=1)
    start = serializers.BooleanField(
        default=False,
        help_text="the agent starts each run as it claims it: record its `started` report too",
    )


class ClaimedRun(serializers.Serializer[Any]):
    job = serializers.IntegerField(source="pk")
    run = serializers.IntegerField()
    name = serializers.CharField()
    instance_type = serializers.CharField(source="instance_type.name")
    plan = serializers.CharField(
        source="plan.name",
        allow_null=True,
        help_text="the capacity plan whose reserved instances the run uses (null: on-demand)",
    )
    count = serializers.SerializerMethodField()
    duration = serializers.IntegerField(allow_null=True)
    checkpoint_interval = serializers.IntegerField(allow_null=True)
    resume_from = serializers.FloatField(source="checkpoint_work")

    def get_count(self, job: Job) -> int:
        return int(job.preferences[job.preference or 0]["count"])


AGENT_NAME_HELP = (
    "the name the run was claimed under (optional): when given, it must be the claimant's"
)


class ReportIn(serializers.Serializer[Any]):
    run = serializers.IntegerField(min_value=1, max_value=DB_INT_MAX)
    agent = serializers.CharField(
        max_length=AGENT_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text=AGENT_NAME_HELP,
    )
    kind = serializers.ChoiceField(choices=["started", "heartbeat", "checkpoint"])
    progress = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=float(MAX_SECONDS)
    )


class RunIn(serializers.Serializer[Any]):
    run = serializers.IntegerField(min_value=1, max_value=DB_INT_MAX)
    message = serializers.CharField(required=False, allow_blank=True, default="")
    agent = serializers.CharField(
        max_length=AGENT_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text=AGENT_NAME_HELP,
    )


class FinishIn(RunIn):
    """``complete``/``fail``, optionally claiming the next runs in the same round trip."""

    agent = serializers.CharField(
        max_length=AGENT_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text="the name the run was claimed under; needed with `claim_next`",
    )
    claim_next = serializers.IntegerField(
        min_value=0,
        max_value=MAX_CLAIM,
        default=0,
        help_text=(
            "run a scheduling cycle of the queue at once and claim up to this many admitted "
            "runs for `agent`, returned in `next`"
        ),
    )
    start = serializers.BooleanField(
        default=False, help_text="as for claim: the runs in `next` are started as claimed"
    )
    output_valid = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text=(
            "complete only: whether the job checked its output and found it valid; a run "
            "that resumed after a preemption then verifies (true) or fails (false) its "
            "workload's recovery (docs/workloads.md)"
        ),
    )


class RunStateOut(serializers.Serializer[Any]):
    job = serializers.IntegerField()
    state = serializers.CharField(required=False)
    run = serializers.IntegerField(required=False)
    stop = serializers.BooleanField(required=False)


class FinishOut(RunStateOut):
    next = ClaimedRun(many=True, required=False)


class StopOrder(serializers.Serializer[Any]):
    job = serializers.IntegerField(source="pk")
    run = serializers.IntegerField(source="stop_requested_run")


class ClaimView(APIView):
    permission_classes = [IsAuthenticated, IsAgent]

    @extend_schema(request=ClaimIn, responses=ClaimedRun(many=True), tags=["agents"])
    def post(self, request: Request, queue_id: int) -> Response:
        """Take up to ``limit`` admitted runs of the queue that no agent holds yet."""
        queue = job_selectors.agent_queue(queue_id)
        data = ClaimIn(data=request.data)
        data.is_valid(raise_exception=True)
        jobs = runs.run_claim(
            actor=request.user,
            queue_id=queue.pk,
            agent=data.validated_data["agent"],
            now=timezone.now(),
            limit=data.validated_data["limit"],
            start=data.validated_data["start"],
        )
        return Response(ClaimedRun(jobs, many=True).data)


class StopsView(APIView):
    permission_classes = [IsAuthenticated, IsAgent]

    @extend_schema(responses=StopOrder(many=True), tags=["agents"])
    def get(self, request: Request, queue_id: int) -> Response:
        """Runs of this queue, claimed with these credentials, that the agent must stop."""
        queue = job_selectors.agent_queue(queue_id)
        jobs = job_selectors.stop_orders(
            queue, agent=request.query_params.get("agent") or None, claimed_by=request.user
        )
        return Response(StopOrder(jobs, many=True).data)


class ReportView(APIView):
    permission_classes = [IsAuthenticated, IsAgent]

    @extend_schema(request=ReportIn, responses=RunStateOut, tags=["agents"])
    def post(self, request: Request, job_id: int) -> Response:
        """``started``, ``heartbeat`` or ``checkpoint`` (with ``progress`` in work units).

        The answer says whether the run must stop; a report for a run that is over is
        refused with 409 and the stop order, so the agent stops it.
        """
        data = ReportIn(data=request.data)
        data.is_valid(raise_exception=True)
        job = runs.run_report(
            actor=request.user,
            job_id=job_id,
            run=data.validated_data["run"],
            kind=data.validated_data["kind"],
            now=timezone.now(),
            work=data.validated_data.get("progress"),
            agent=data.validated_data["agent"] or None,
        )
        return Response({"job": job.pk, "run": job.run, "stop": False})


def _finish(request: Request, job_id: int, finish: Callable[[dict[str, Any]], Job]) -> Response:
    """Complete or fail a run; with ``claim_next``, reassign its instances and claim.

    With ``claim_next`` the change asks the worker for no cycle: this request runs the
    queue's cycle itself once the completion committed (the same cycle as the worker's,
    waiting for the queue's lock like any cycle), then claims admitted runs for the
    agent, so a slot is refilled in one round trip instead of complete, wait for the
    worker, poll, claim.
    """
    data = FinishIn(data=request.data)
    data.is_valid(raise_exception=True)
    fields = data.validated_data
    claim_next = fields["claim_next"]
    if claim_next and not fields["agent"]:
        raise ValidationFailed({"agent": ["name the agent that claims the next runs"]})
    if not claim_next:
        job = finish(fields)
        return Response({"job": job.pk, "state": job.state})
    with hooks.collect_changes() as changed:
        job = finish(fields)
    hooks.run_cycles_now(changed)
    claimed = runs.run_claim(
        actor=request.user,
        queue_id=job.queue_id,
        agent=fields["agent"],
        now=timezone.now(),
        limit=claim_next,
        start=fields["start"],
    )
    return Response(
        {"job": job.pk, "state": job.state, "next": ClaimedRun(claimed, many=True).data}
    )


class CompleteView(APIView):
    permission_classes = [IsAuthenticated, IsAgent]

    @extend_schema(request=FinishIn, responses=FinishOut, tags=["agents"])
    def post(self, request: Request, job_id: int) -> Response:
        """The run finished its work (``claim_next``: and claim the next runs)."""
        return _finish(
            request,
            job_id,
            lambda f: runs.run_complete(
                actor=request.user,
                job_id=job_id,
                run=f["run"],
                now=timezone.now(),
                agent=f["agent"] or None,
                output_valid=f["output_valid"],
            ),
        )


class FailView(APIView):
    permission_classes = [IsAuthenticated, IsAgent]

    @extend_schema(request=FinishIn, responses=FinishOut, tags=["agents"])
    def post(self, request: Request, job_id: int) -> Response:
        """The job itself failed (``claim_next``: and claim the next runs)."""
        return _finish(
            request,
            job_id,
            lambda f: runs.run_fail(
                actor=request.user,
                job_id=job_id,
                run=f["run"],
                now=timezone.now(),
                message=f["message"],
                agent=f["agent"] or None,
            ),
        )


class StoppedView(APIView):
    permission_classes = [IsAuthenticated, IsAgent]

    @extend_schema(request=RunIn, responses=RunStateOut, tags=["agents"])
    def post(self, request: Request, job_id: int) -> Response:
        data = RunIn(data=request.data)
        data.is_valid(raise_exception=True)
        job = runs.run_stop_acknowledged(
            actor=request.user,
            job_id=job_id,
            run=data.validated_data["run"],
            now=timezone.now(),
            agent=data.validated_data["agent"] or None,
        )
        return Response({"job": job.pk, "state": job.state})
