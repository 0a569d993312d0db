"""API routes (docs/data-model.md). Each resource module registers its viewsets here."""

from django.contrib.auth.decorators import login_required
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from governance.api import agents as agent_api
from governance.api.agreements import AgreementViewSet
from governance.api.audit import AuditEntryViewSet
from governance.api.auth import ObtainTokenView
from governance.api.capacity import InstanceTypeViewSet, QueueViewSet
from governance.api.certifications import CertificationViewSet
from governance.api.change_requests import ChangeRequestViewSet
from governance.api.decisions import DecisionViewSet
from governance.api.exceptions import PriorityExceptionViewSet
from governance.api.jobs import JobViewSet
from governance.api.notifications import NotificationViewSet
from governance.api.plans import PlanViewSet
from governance.api.priorities import PriorityDefinitionViewSet
from governance.api.shares import ShareViewSet
from governance.api.signals import (
    ChargebackView,
    QueueHistoryView,
    SignalsView,
    WhatIfAttachView,
    WhatIfDetailView,
    WhatIfListView,
)
from governance.api.slurm import JobEndedView as SlurmJobEndedView
from governance.api.teams import TeamViewSet
from governance.api.workloads import WorkloadViewSet

router = DefaultRouter()


router.register("teams", TeamViewSet, basename="team")
router.register("instance-types", InstanceTypeViewSet, basename="instance-type")
router.register("queues", QueueViewSet, basename="queue")
router.register("shares", ShareViewSet, basename="share")
router.register("priority-definitions", PriorityDefinitionViewSet, basename="priority-definition")
router.register("jobs", JobViewSet, basename="job")
router.register("exceptions", PriorityExceptionViewSet, basename="exception")
router.register("change-requests", ChangeRequestViewSet, basename="change-request")
router.register("agreements", AgreementViewSet, basename="agreement")
router.register("audit", AuditEntryViewSet, basename="audit")
router.register("notifications", NotificationViewSet, basename="notification")
router.register("plans", PlanViewSet, basename="plan")
router.register("workloads", WorkloadViewSet, basename="workload")
router.register("decisions", DecisionViewSet, basename="decision")
router.register("certifications", CertificationViewSet, basename="certification")


agent_urls = [
    path("agents/queues/<int:queue_id>/claim/", agent_api.ClaimView.as_view(), name="agent-claim"),
    path("agents/queues/<int:queue_id>/stops/", agent_api.StopsView.as_view(), name="agent-stops"),
    path("agents/jobs/<int:job_id>/report/", agent_api.ReportView.as_view(), name="agent-report"),
    path(
        "agents/jobs/<int:job_id>/complete/",
        agent_api.CompleteView.as_view(),
        name="agent-complete",
    ),
    path("agents/jobs/<int:job_id>/fail/", agent_api.FailView.as_view(), name="agent-fail"),
    path(
        "agents/jobs/<int:job_id>/stopped/", agent_api.StoppedView.as_view(), name="agent-stopped"
    ),
]

urlpatterns = [
    *agent_urls,
    path("auth/token/", ObtainTokenView.as_view(), name="api-token"),
    path("signals/", SignalsView.as_view(), name="api-signals"),
    path("slurm/job-ended/", SlurmJobEndedView.as_view(), name="api-slurm-job-ended"),
    path("signals/chargeback/", ChargebackView.as_view(), name="api-chargeback"),
    path("queues/<int:pk>/history/", QueueHistoryView.as_view(), name="api-queue-history"),
    path("queues/<int:pk>/whatif/", WhatIfListView.as_view(), name="api-queue-whatif"),
    path(
        "queues/<int:pk>/whatif/<int:run_id>/",
        WhatIfDetailView.as_view(),
        name="api-queue-whatif-detail",
    ),
    path(
        "queues/<int:pk>/whatif/<int:run_id>/attach/",
        WhatIfAttachView.as_view(),
        name="api-queue-whatif-attach",
    ),
    # Signed-in users only; the docs page sends a browser to the sign-in page first. The
    # split view serves Swagger UI's start-up script as a file (no inline script: CSP).
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "docs/",
        login_required(SpectacularSwaggerSplitView.as_view(url_name="api-schema")),
        name="api-docs",
    ),
    *router.urls,
]
