"""HTMX pages. Each page includes its live partials; one endpoint re-renders each partial.

Page modules register their routes here (namespace ``web``); the navigation in
``governance.web.nav`` links to ``web:overview``, ``web:queues``, ``web:jobs``,
``web:teams``, ``web:exceptions``, ``web:priorities``, ``web:agreements``, ``web:audit`` and
(admins) ``web:admin``.
"""

from django.urls import path

from governance.web import (
    account,
    administration,
    jobs,
    overview,
    plans,
    queues,
    shares,
    slurm,
    teams,
)
from governance.web import agreements as agreement_pages
from governance.web import audit as audit_pages
from governance.web import certifications as certification_pages
from governance.web import change_requests as change_request_pages
from governance.web import decisions as decision_pages
from governance.web import docs as doc_pages
from governance.web import exceptions as exception_pages
from governance.web import notifications as notification_pages
from governance.web import priorities as priority_pages
from governance.web import signals as signal_pages
from governance.web import whatif as whatif_pages
from governance.web import workloads as workload_pages

app_name = "web"

urlpatterns: list = [
    # Overview (issue 5): usage bars and the decision feed, both live.
    path("", overview.overview, name="overview"),
    # The guides (docs/*.md), readable before signing in.
    path("docs/<str:name>/", doc_pages.doc_page, name="doc"),
    path("partials/usage/", overview.usage_partial, name="usage-partial"),
    path("partials/feed/", overview.feed_partial, name="feed-partial"),
    # Queues and shares.
    path("queues/", queues.queue_list, name="queues"),
    path("queues/<int:queue_id>/", queues.queue_detail, name="queue"),
    path("queues/<int:queue_id>/slurm/", slurm.queue_slurm, name="queue-slurm"),
    path(
        "queues/<int:queue_id>/partials/usage/",
        queues.queue_usage_partial,
        name="queue-usage-partial",
    ),
    path("shares/<int:share_id>/", shares.share_detail, name="share"),
    path("shares/<int:share_id>/edit/", shares.share_edit, name="share-edit"),
    path("shares/<int:share_id>/preview/", shares.share_preview, name="share-preview"),
    path("shares/<int:share_id>/ledger/", shares.share_ledger, name="share-ledger"),
    # Capacity plans.
    path("plans/", plans.plan_list, name="plans"),
    path("plans/new/", plans.plan_new, name="plan-new"),
    path("plans/<int:plan_id>/resize/", plans.plan_resize, name="plan-resize"),
    path("plans/<int:plan_id>/end/", plans.plan_end, name="plan-end"),
    # Teams: your team first, then the others.
    path("teams/", teams.team_list, name="teams"),
    path("teams/<int:team_id>/", teams.team_detail, name="team"),
    path("teams/<int:team_id>/workloads/new/", workload_pages.workload_new, name="workload-new"),
    path("workloads/<int:workload_id>/", workload_pages.workload_detail, name="workload"),
    path("workloads/<int:workload_id>/edit/", workload_pages.workload_edit, name="workload-edit"),
    path("decisions/<int:pk>/", decision_pages.decision_detail, name="decision"),
    path(
        "decisions/<int:pk>/<str:action>/", decision_pages.decision_answer, name="decision-answer"
    ),
    path(
        "workloads/<int:workload_id>/certifications/",
        certification_pages.certification_propose,
        name="certification-propose",
    ),
    path(
        "workloads/<int:workload_id>/template/",
        certification_pages.workload_template,
        name="workload-template",
    ),
    path(
        "certifications/<int:cert_id>/decide/",
        certification_pages.certification_decide,
        name="certification-decide",
    ),
    path(
        "certifications/<int:cert_id>/revoke/",
        certification_pages.certification_revoke,
        name="certification-revoke",
    ),
    # Jobs.
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/new/", jobs.job_new, name="job-new"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="job"),
    path("jobs/<int:job_id>/partials/status/", jobs.job_status_partial, name="job-status-partial"),
    path("jobs/<int:job_id>/priority/", jobs.job_reprioritise, name="job-reprioritise"),
    path("jobs/<int:job_id>/cancel/", jobs.job_cancel, name="job-cancel"),
    path("jobs/<int:job_id>/output/", jobs.job_output, name="job-output"),
    # The signed-in user's API tokens.
    path("account/tokens/", account.token_list, name="tokens"),
    path("account/tokens/<str:key>/revoke/", account.token_revoke, name="token-revoke"),
]

# Governance pages (exceptions, priorities, agreements, audit trail).

urlpatterns += [
    path("exceptions/", exception_pages.exception_list, name="exceptions"),
    path("exceptions/new/", exception_pages.exception_new, name="exception_new"),
    path("exceptions/<int:pk>/", exception_pages.exception_detail, name="exception"),
    path(
        "exceptions/<int:pk>/<str:action>/",
        exception_pages.exception_decide,
        name="exception_decide",
    ),
    path("change-requests/", change_request_pages.change_request_list, name="change-requests"),
    path(
        "change-requests/<int:pk>/",
        change_request_pages.change_request_detail,
        name="change-request",
    ),
    path(
        "change-requests/<int:pk>/<str:action>/",
        change_request_pages.change_request_decide,
        name="change-request-decide",
    ),
    path(
        "shares/<int:share_id>/request/",
        change_request_pages.change_request_new,
        name="change-request-new",
    ),
    path("priorities/", priority_pages.priority_list, name="priorities"),
    path("priorities/new/", priority_pages.priority_new, name="priority_new"),
    path("priorities/<int:pk>/edit/", priority_pages.priority_edit, name="priority_edit"),
    path("priorities/<int:pk>/delete/", priority_pages.priority_delete, name="priority_delete"),
    path("agreements/", agreement_pages.agreement_list, name="agreements"),
    path("agreements/new/", agreement_pages.agreement_new, name="agreement_new"),
    path("agreements/<int:pk>/", agreement_pages.agreement_detail, name="agreement"),
    path("agreements/<int:pk>/edit/", agreement_pages.agreement_edit, name="agreement_edit"),
    path(
        "agreements/<int:pk>/evaluate/",
        agreement_pages.agreement_evaluate,
        name="agreement_evaluate",
    ),
    path("agreements/<int:pk>/review/", agreement_pages.agreement_review, name="agreement_review"),
    path("audit/", audit_pages.audit_list, name="audit"),
    path("signals/", signal_pages.signals_page, name="signals"),
    path("queues/<int:queue_id>/whatif/", whatif_pages.whatif_new, name="whatif-new"),
    path("whatif/<int:run_id>/", whatif_pages.whatif_detail, name="whatif"),
    path(
        "whatif/<int:run_id>/partials/status/",
        whatif_pages.whatif_status_partial,
        name="whatif-status",
    ),
    path("whatif/<int:run_id>/attach/", whatif_pages.whatif_attach, name="whatif-attach"),
    path("notifications/", notification_pages.notification_list, name="notifications"),
    path("notifications/read/", notification_pages.notification_read, name="notifications-read"),
]

# The admins' pages (issue 13): queues, instance types, capacity, teams, shares, users.

urlpatterns += [
    path("admin/", administration.index, name="admin"),
    path("admin/types/new/", administration.type_new, name="admin-type-new"),
    path("admin/types/<int:pk>/", administration.type_edit, name="admin-type"),
    path("admin/queues/new/", administration.queue_new, name="admin-queue-new"),
    path("admin/queues/<int:pk>/", administration.queue_edit, name="admin-queue"),
    path("admin/teams/new/", administration.team_new, name="admin-team-new"),
    path("admin/teams/<int:pk>/", administration.team_edit, name="admin-team"),
    path("admin/shares/new/", administration.share_new, name="admin-share-new"),
    path("admin/users/new/", administration.user_new, name="admin-user-new"),
    path("admin/users/<int:pk>/", administration.user_edit, name="admin-user"),
]
