"""Jobs API (docs/data-model.md): list, submit, read with events, reprioritise, cancel."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from governance import roles
from governance.api.borrowed import (
    BorrowedProgressSerializer,
    EntitledSerializer,
    ExposureSerializer,
)
from governance.api.common import StorableJSONField, call_service, path_id, represent
from governance.api.idempotency import idempotent
from governance.models import Job, JobEvent, JobKind, SlurmRun
from governance.selectors import borrowed, scheduling
from governance.selectors import jobs as job_selectors
from governance.selectors.filters import JobFilter
from governance.services import jobs as job_services
from governance.services import workloads as workload_services
from governance.services.errors import NotFound


class PreferenceSerializer(serializers.Serializer):
    """Schema of one preference: an instance type, or a capacity plan of the job's share
    (training jobs only; no ``instance_type`` then). The job service validates the list."""

    instance_type = serializers.CharField(required=False)
    plan = serializers.CharField(required=False, help_text="a capacity plan's name")
    count = serializers.IntegerField(required=False, allow_null=True)
    runtime = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="expected run time of the job on this preference, in seconds (e.g. from "
        "a benchmark); judges the deadline and the budget when the job has no duration",
    )


class ReasonSerializer(serializers.Serializer):
    preference = serializers.IntegerField(help_text="0-based index in the job's preferences")
    reason = serializers.CharField(help_text="a reason code, as listed in docs/scheduling.md")
    message = serializers.CharField()
    can_ever_start = serializers.BooleanField(
        help_text="false when this preference can never start as the share and queue are "
        "configured (it asks more than the capacity, or than the share's limit plus what "
        "it may borrow); waiting will not help"
    )
    what_would_let_it = serializers.CharField(
        help_text="when it can never start: what would let it (raise the limit or the "
        "borrow limit, more capacity, another preference); empty otherwise"
    )


class ExplainSerializer(serializers.Serializer):
    reasons = ReasonSerializer(
        many=True,
        help_text=(
            "one reason per preference, in preference order"
            " (docs/scheduling.md#why-is-my-job-waiting)"
        ),
    )
    position = serializers.IntegerField(
        allow_null=True,
        help_text=(
            "1-based place among the queue's pending jobs in the cycle's order (priority "
            "descending, then submission, then id); null when the job is not pending"
        ),
    )
    estimated_start = serializers.DateTimeField(
        allow_null=True,
        help_text="when the engine, played forward on a copy of the live state, starts it",
    )
    estimate_basis = serializers.CharField(
        allow_null=True,
        help_text=(
            "how the estimate was made, e.g. 'engine playback, remaining work known for 8 "
            "of 10 running jobs; assumes no new submissions or changes'"
        ),
    )
    entitled = EntitledSerializer(
        allow_null=True,
        help_text="a pending job's start on its share's entitlement alone (nobody lends)",
    )
    exposure = ExposureSerializer(
        allow_null=True, help_text="a running job on borrowed capacity: how exposed it is"
    )
    borrowed_progress = BorrowedProgressSerializer(
        help_text="which part of its running was on borrowed capacity"
    )


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["at", "type", "message", "data"]


class JobSerializer(serializers.ModelSerializer):
    """A job as the API shows it (docs/data-model.md), plus ``submitter`` and ``borrowed``."""

    instance_type: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    submitter = serializers.CharField(source="submitter.username", read_only=True)
    team = serializers.IntegerField(source="share.team_id", read_only=True)
    preferences = serializers.SerializerMethodField()
    plan: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="name",
        read_only=True,
        allow_null=True,
        help_text="The capacity plan the current (or last) run was admitted on, if any.",
    )
    max_cost = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        coerce_to_string=False,
        read_only=True,
        allow_null=True,
        help_text="budget of one run in the queue's currency: preferences that would cost "
        "more are not eligible (docs/scheduling.md#deadline-and-budget)",
    )

    template = serializers.JSONField(
        read_only=True,
        help_text="when the preferences came from the workload's template "
        '(docs/workloads.md#preference-templates): {"entries": [{"position", '
        '"certification", "reason"}] in the order of preferences, "skipped": [{"position", '
        '"configuration", "why"}]}; {} otherwise',
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "queue",
            "share",
            "team",
            "name",
            "kind",
            "priority",
            "preferences",
            "count",
            "max_pending",
            "checkpoint_interval",
            "duration",
            "may_borrow",
            "preemptible",
            "deadline",
            "max_cost",
            "workload",
            "template",
            "certification_override",
            "output_valid",
            "state",
            "instance_type",
            "plan",
            "preference",
            "preemptions",
            "borrowed",
            "submitter",
            "submitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(PreferenceSerializer(many=True))
    def get_preferences(self, job: Job) -> list[dict[str, Any]]:
        return list(job.preferences)


class SlurmRunSerializer(serializers.ModelSerializer):
    """The Slurm job that carried one run (queues run by Slurm; docs/slurm.md)."""

    class Meta:
        model = SlurmRun
        fields = [
            "run",
            "name",
            "state",
            "slurm_job_id",
            "partition",
            "stdout",
            "stderr",
            "slurm_state",
            "exit_code",
            "signal",
            "unix_user",
            "created_at",
            "ended_at",
        ]
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    """A job with its events; ``program`` only for those who may see it
    (``roles.may_see_program``: its team, admins, the agent holding its run)."""

    events = JobEventSerializer(many=True, read_only=True)
    program = serializers.SerializerMethodField(
        help_text=(
            "What the job runs, with its env: shown to the job's team (members and leads), "
            "admins and the agent holding its run; null for everyone else."
        )
    )
    slurm_runs = SlurmRunSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "program", "events", "slurm_runs"]
        read_only_fields = fields

    @extend_schema_field({"type": "object", "nullable": True})
    def get_program(self, job: Job) -> dict[str, Any] | None:
        if self.context.get("program_visible"):
            return dict(job.program)
        request = self.context.get("request")
        if request is None or not roles.may_see_program(request.user, job):
            return None
        return dict(job.program)


class JobSubmitSerializer(serializers.Serializer):
    """Parses field types only; every rule is checked by ``services.jobs.job_submit``."""

    queue = serializers.IntegerField(required=False, allow_null=True)
    share = serializers.IntegerField()
    name = serializers.CharField(allow_blank=True)
    kind = serializers.CharField(required=False, default=JobKind.TRAINING)
    priority = serializers.IntegerField(required=False, default=0)
    preferences = StorableJSONField(
        required=False,
        default=None,
        help_text="omit (or []) with a workload: its preference template is taken",
    )
    count = serializers.IntegerField(required=False, allow_null=True, default=None)
    max_pending = serializers.IntegerField(required=False, allow_null=True, default=None)
    checkpoint_interval = serializers.IntegerField(required=False, allow_null=True, default=None)
    duration = serializers.IntegerField(required=False, allow_null=True, default=None)
    may_borrow = serializers.BooleanField(
        required=False,
        default=True,
        help_text="false: the job never runs on borrowed capacity",
    )
    preemptible = serializers.BooleanField(
        required=False,
        default=True,
        help_text="false: never stopped for a higher-priority job of its share",
    )
    deadline = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="preferences whose run would end after it are not eligible; the job "
        "times out (reason deadline) when none is",
    )
    max_cost = serializers.DecimalField(
        max_digits=20,
        decimal_places=4,
        required=False,
        allow_null=True,
        default=None,
        help_text="budget in the queue's currency (at most 2 decimals): preferences that "
        "would cost more are not eligible; refused when every one would",
    )
    workload = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="id of a workload of the share's team (docs/workloads.md); a protected "
        "one makes the job never borrow and never an in-share victim",
    )
    certification_override = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="admins: the reason to run uncertified preferences in a certified-only share",
    )
    program = StorableJSONField(
        required=False,
        default=None,
        help_text=(
            "What the job runs, required on a queue run by Slurm (docs/slurm.md): "
            '{"command": [argv]} or {"script": "#!..."} (no line starting #SBATCH, #PBS or '
            '#BSUB), with an optional absolute "workdir" and "env" (names not starting '
            "GOV_, SLURM_ or SBATCH_)."
        ),
    )


class JobPatchSerializer(serializers.Serializer):
    priority = serializers.IntegerField()
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class JobCancelSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class JobOutputSerializer(serializers.Serializer):
    valid = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="the output is valid"
    )
    note = serializers.CharField(required=False, allow_blank=True, default="")


class JobViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Jobs: everyone signed in reads; the job service decides who may change what."""

    serializer_class = JobSerializer
    filterset_class = JobFilter
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[Job]:
        return job_selectors.jobs()

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        if self.action == "retrieve":
            return JobDetailSerializer
        return JobSerializer

    def _detail(self, job_id: int) -> Response:
        job = job_selectors.job_with_events(job_id)
        if job is None:
            raise NotFound({"detail": [f"No job with id {job_id}."]})
        return Response(represent(JobDetailSerializer, job, {"request": self.request}))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._detail(self._pk())

    def _pk(self) -> int:
        return path_id(self.kwargs.get("pk"), "job")

    @extend_schema(request=JobSubmitSerializer, responses={201: JobDetailSerializer})
    @idempotent
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        job = call_service(
            JobSubmitSerializer,
            request.data,
            lambda data: job_services.job_submit(
                actor=request.user,
                share=data["share"],
                queue=data.get("queue"),
                name=data["name"],
                kind=data["kind"],
                priority=data["priority"],
                preferences=data["preferences"],
                count=data["count"],
                max_pending=data["max_pending"],
                checkpoint_interval=data["checkpoint_interval"],
                duration=data["duration"],
                program=data.get("program"),
                may_borrow=data["may_borrow"],
                preemptible=data["preemptible"],
                deadline=data["deadline"],
                max_cost=data["max_cost"],
                workload=data["workload"],
                certification_override=data["certification_override"],
            ),
        )
        # Built from what the service returned (the job, its share and team, the
        # submitter, its one ``submitted`` event): re-reading it doubled a submission's cost.
        # The submitter sees the program: ``job_submit`` accepts only the members and leads
        # of the job's team and admins, whom ``roles.may_see_program`` shows it to (asking
        # it again cost two queries per submission).
        context = {"request": request, "program_visible": True}
        return Response(
            represent(JobDetailSerializer, job, context), status=status.HTTP_201_CREATED
        )

    @extend_schema(
        request=JobPatchSerializer,
        responses={200: JobDetailSerializer},
        description="Change a job's priority (the only field a PATCH may change).",
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        job_id = self._pk()
        body = request.data
        extra = sorted(set(body) - {"priority", "reason"}) if isinstance(body, dict) else []
        # A body that is not an object (``null``) still meets the permission check first.
        call_service(
            JobPatchSerializer,
            body,
            lambda data: job_services.job_reprioritise(
                actor=request.user, job=job_id, priority=data["priority"], reason=data["reason"]
            ),
            errors={field: ["Only priority can be changed on a job."] for field in extra},
        )
        return self._detail(job_id)

    @extend_schema(request=JobCancelSerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job_id = self._pk()
        call_service(
            JobCancelSerializer,
            request.data,
            lambda data: job_services.job_cancel(
                actor=request.user, job=job_id, reason=data["reason"]
            ),
        )
        return self._detail(job_id)

    @extend_schema(
        request=JobOutputSerializer,
        responses={200: JobDetailSerializer},
        description=(
            "A lead of the job's team (or an admin) confirms (valid: true) or rejects a "
            "resumed run's output: the job must have succeeded after a preemption and name "
            "a workload, whose recovery becomes verified or failed with the job as evidence "
            "(docs/workloads.md)."
        ),
    )
    @action(detail=True, methods=["post"])
    def output(self, request: Request, pk: str | None = None) -> Response:
        job_id = self._pk()
        call_service(
            JobOutputSerializer,
            request.data,
            lambda data: workload_services.job_output_judge(
                actor=request.user, job=job_id, valid=data.get("valid"), note=data["note"]
            ),
        )
        return self._detail(job_id)

    @extend_schema(
        responses={200: ExplainSerializer},
        description=(
            "Why a pending job waits (`reasons`: one per preference, in preference order, "
            "as the engine gives them; codes in docs/scheduling.md), its `position` in the "
            "cycle's order and its `estimated_start`, with `estimate_basis` saying how it "
            "was estimated (docs/insight.md). Empty reasons and nulls for a job that is "
            "not pending; `estimated_start` is null when the playback finds no start. Each "
            "reason says whether that preference could ever start as configured "
            "(`can_ever_start`) and, if not, what would let it (`what_would_let_it`). "
            "Entitled and borrowed: `entitled` is a pending job's start on its share's "
            "entitlement alone (as if nobody lent), `exposure` a running job's exposure on "
            "borrowed capacity (who lent it, what they wait for, `reclaim_imminent` or "
            "`may_be_reclaimed`), `borrowed_progress` which part of its running borrowed."
        ),
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def explain(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        body = {"reasons": scheduling.explain_job(job), **scheduling.forecast_job(job)}
        view = borrowed.job_view(job, timezone.now())
        body.update(view, borrowed_progress=view["borrowed_progress"].as_json())
        return Response(ExplainSerializer(body).data)
