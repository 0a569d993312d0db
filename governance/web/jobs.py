"""Job pages: the filtered list, one job with its live status and timeline, submission,
reprioritisation and cancellation (each a POST calling one job service)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.paginator import Paginator
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from governance import roles
from governance.models import Job, JobEvent, JobState, SlurmRun
from governance.models.jobs import ACTIVE_STATES
from governance.selectors import borrowed, scheduling, state_cache
from governance.selectors import exceptions as exception_selectors
from governance.selectors import jobs as job_selectors
from governance.selectors import plans as plan_selectors
from governance.selectors import priorities as priority_selectors
from governance.selectors import shares as share_selectors
from governance.selectors import workloads as workload_selectors
from governance.services import jobs as job_services
from governance.services import workloads as workload_services
from governance.services.errors import ServiceError
from governance.web import fragments
from governance.web.errors import apply_service_errors, check_with_service
from governance.web.forms_jobs import (
    CancelForm,
    JobFilterForm,
    JobSubmitForm,
    OutputForm,
    ReprioritiseForm,
)
from governance.web.links import url_pattern
from governance.web.presenters import jobs as web_jobs

PAGE_SIZE = 50
COUNT_CAP = 5_000


class CappedPaginator(Paginator):
    """Counts at most COUNT_CAP + 1 rows: a COUNT(*) over every job grows with the table
    (tens of milliseconds at 50,000 jobs), while nobody pages through 100 pages of jobs
    rather than filter. Past the cap the page says "5,000+" and stops at page 100."""

    @cached_property
    def count(self) -> int:
        jobs: Any = self.object_list  # a QuerySet[Job] (Paginator's stubs say less)
        counted: int = jobs.order_by()[: COUNT_CAP + 1].count()
        return counted

    @property
    def capped(self) -> bool:
        return self.count > COUNT_CAP


# The list is a fragment (web/fragments.py) of what it shows: jobs' names, states,
# priorities, borrowing, preemptions, shares, queues, teams, submitters and instance
# types, each written with a job event or an audit entry (``page_version``; a
# heartbeat rewrites only progress fields, which the list does not show). The filters'
# relative windows ("the last day") move with time alone (BUCKET_SECONDS).
BUCKET_SECONDS = 60


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    return fragments.page(
        request,
        "jobs",
        "jobs/list.html",
        lambda: _list_context(request),
        version=state_cache.page_version(),
        bucket=BUCKET_SECONDS,
    )


def _list_context(request: HttpRequest) -> dict[str, Any]:
    form = JobFilterForm(request.GET or None, **share_selectors.filter_choices())
    filters = form.filters() if form.is_bound else {}
    page = CappedPaginator(web_jobs.filtered_jobs(**filters), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    # The page's rows as plain values (the count above joins nothing), links without a
    # reverse per row (web_jobs.job_rows, governance.web.links).
    sliced: Any = page.object_list  # the page's slice of the QuerySet[Job]
    rows = web_jobs.job_rows(sliced.values_list(*web_jobs.LIST_COLUMNS))
    job_url, share_url = url_pattern("web:job"), url_pattern("web:share")
    for row in rows:
        row.page_url = job_url.format(row.pk)
        row.share_url = share_url.format(row.share_id)
    page.object_list = rows
    query = request.GET.copy()
    query.pop("page", None)
    return {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "filtered": any(v for v in filters.values()),
        "can_submit": _may_submit_any(request),
    }


def _may_submit_any(request: HttpRequest) -> bool:
    return roles.is_admin(request.user) or bool(roles.member_team_ids(request.user))


def _job_or_404(job_id: int, *, page: bool = False) -> Job:
    """The job (``page``: with what only the full page shows, see ``job_with_events``)."""
    job = job_selectors.job_with_events(job_id, with_decisions=page)
    if job is None:
        raise Http404("No such job.")
    return job


def _status_context(job: Job) -> dict[str, Any]:
    pending = job.state == JobState.PENDING
    reasons = scheduling.explain_job(job) if pending else []
    return {
        "job": job,
        "forecast": scheduling.forecast_job(job) if pending else None,
        "timeline": web_jobs.timeline(job),
        "reasons": web_jobs.with_reason_words(reasons),
        # Waiting cannot help: no preference fits the share and queue as configured.
        "never": bool(reasons) and not any(r["can_ever_start"] for r in reasons),
        # Which preferences its deadline and budget still allow, until when, at what cost.
        "outlook": job_selectors.choice_outlook(job, timezone.now()) if pending else [],
        "active": job.state in ACTIVE_STATES,
        "slurm_runs": job_selectors.slurm_runs(job),
        # Entitled and borrowed: start on the entitlement alone, exposure, borrowed runs.
        **borrowed.job_view(job, timezone.now()),
    }


def _detail(
    request: HttpRequest,
    job: Job,
    *,
    priority_form: ReprioritiseForm | None = None,
    cancel_form: CancelForm | None = None,
    output_form: OutputForm | None = None,
    status: int = 200,
) -> HttpResponse:
    context = _page_context(request, job, priority_form, cancel_form, output_form)
    return render(request, "jobs/detail.html", context, status=status)


def _page_context(
    request: HttpRequest,
    job: Job,
    priority_form: ReprioritiseForm | None = None,
    cancel_form: CancelForm | None = None,
    output_form: OutputForm | None = None,
) -> dict[str, Any]:
    may_manage = job_services.may_manage(request.user, job)
    return {
        **_status_context(job),
        "may_manage": may_manage,
        "priority_form": priority_form or ReprioritiseForm(initial={"priority": job.priority}),
        "cancel_form": cancel_form or CancelForm(),
        "priority_allowance": (
            priority_selectors.allowance_words(request.user, job.share.team_id)
            if may_manage
            else ""
        ),
        "band": priority_selectors.band_for(job.priority),
        # The exceptions filed for this job, whatever their state (newest first).
        "job_exceptions": list(exception_selectors.exceptions().filter(job_id=job.pk)[:20]),
        "may_file_exception": roles.is_lead_of(request.user, job.share.team_id),
        "may_judge_output": (
            job.state == JobState.SUCCEEDED
            and job.workload_id is not None
            and workload_services.resumed(job)
            and workload_services.may_judge(request.user, job)
        ),
        "output_form": output_form or OutputForm(),
    }


@login_required
@require_POST
def job_output(request: HttpRequest, job_id: int) -> HttpResponse:
    """A lead confirms or rejects a resumed run's output (docs/workloads.md)."""
    job = _job_or_404(job_id)
    form = OutputForm(request.POST)
    if not form.is_valid():
        return _detail(request, job, output_form=form, status=400)
    try:
        workload_services.job_output_judge(
            actor=request.user,
            job=job.pk,
            valid=form.cleaned_data["valid"],
            note=form.cleaned_data["note"],
        )
    except ServiceError as exc:
        apply_service_errors(form, exc)
        return _detail(request, _job_or_404(job_id), output_form=form, status=exc.status)
    verdict = "valid" if form.cleaned_data["valid"] else "invalid"
    messages.success(request, f"Output of {job.name} marked {verdict}.")
    return redirect("web:job", job_id=job.pk)


# The job page and its live status are fragments (web/fragments.py) of what they read:
# the job's row (``xmin`` and ``ctid``: a heartbeat or a checkpoint rewrites its
# progress without an event), its events and Slurm runs (the newest event, a digest of
# the runs' rows), its queue's state (the reasons it waits and its forecast, cached
# under that fingerprint: ``selectors.scheduling``) and what is audited
# (``page_version``: exceptions, decisions, priority bands, the other jobs named in its
# timeline). Its outlook, exposure and a forecast's age move with time alone
# (STATUS_BUCKET_SECONDS, the order of the status's own refresh). The status is the same
# for everyone; the page per user (who manages the job, judges its output, files an
# exception). A form with problems is rendered, not cached.
STATUS_BUCKET_SECONDS = 10

_JOB_VERSION_SQL = """
SELECT job.queue_id, job.name, job.xmin::text || job.ctid::text,
  (SELECT max(e.id) FROM {event} e WHERE e.job_id = job.id),
  (SELECT md5(coalesce(string_agg(r.id || ':' || r.xmin, ',' ORDER BY r.id), ''))
     FROM {slurm} r WHERE r.job_id = job.id),
  {record},
  {page}
FROM {job} job WHERE job.id = %s
"""


def _job_version(job_id: int) -> tuple[str, str]:
    """(the job's name, the version its page and status are cached under); 404 if none.
    The job's rows, its queue's record version and ``page_version`` in one query."""
    sql = _JOB_VERSION_SQL.format(
        event=JobEvent._meta.db_table,
        slurm=SlurmRun._meta.db_table,
        job=Job._meta.db_table,
        record=state_cache.record_version_sql("job.queue_id").strip(),
        page=state_cache.page_version_sql(),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [job_id])
        row = cursor.fetchone()
    if row is None:
        raise Http404("No such job.")
    split = len(row) - state_cache.PAGE_VERSION_COLUMNS
    queue_id, name, *own, queue_event, audit = row[:split]
    record = state_cache.record_version_of(queue_id, queue_event, audit)
    parts = [*map(str, own), state_cache.fingerprint_under(record, queue_id)]
    return name, "|".join([*parts, state_cache.page_version_of(row[split:])])


def _status_html(request: HttpRequest, job_id: int, version: str) -> SafeString:
    return fragments.fragment(
        request,
        "job-status",
        template="jobs/detail.html#status",
        context=lambda: _status_context(_job_or_404(job_id)),
        version=version,
        args=[job_id],
        viewer=fragments.Viewer.EVERYONE,
        bucket=STATUS_BUCKET_SECONDS,
    )


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    name, version = _job_version(job_id)

    def context() -> dict[str, Any]:
        job = _job_or_404(job_id, page=True)
        return {**_page_context(request, job), "status_html": fragments.hole("status")}

    body = fragments.fragment(
        request,
        "job",
        template="jobs/detail.html#body",
        context=context,
        version=version,
        args=[job_id],
        viewer=fragments.Viewer.USER,
        bucket=STATUS_BUCKET_SECONDS,
        holes={"status": lambda: _status_html(request, job_id, version)},
    )
    return render(request, "jobs/detail.html", {"job": {"name": name}, "body": body})


@login_required
def job_status_partial(request: HttpRequest, job_id: int) -> HttpResponse:
    _, version = _job_version(job_id)
    return HttpResponse(_status_html(request, job_id, version))


@login_required
@require_POST
def job_reprioritise(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(job_id)
    form = ReprioritiseForm(request.POST)
    if not form.is_valid():
        return _detail(request, job, priority_form=form, status=400)
    try:
        job_services.job_reprioritise(
            actor=request.user,
            job=job.pk,
            priority=form.cleaned_data["priority"],
            reason=form.cleaned_data["reason"],
        )
    except ServiceError as exc:
        apply_service_errors(form, exc)
        return _detail(request, _job_or_404(job_id), priority_form=form, status=exc.status)
    messages.success(request, f"Priority of {job.name} set to {form.cleaned_data['priority']}.")
    return redirect("web:job", job_id=job.pk)


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(job_id)
    form = CancelForm(request.POST)
    if not form.is_valid():
        return _detail(request, job, cancel_form=form, status=400)
    try:
        job_services.job_cancel(actor=request.user, job=job.pk, reason=form.cleaned_data["reason"])
    except ServiceError as exc:
        apply_service_errors(form, exc)
        return _detail(request, _job_or_404(job_id), cancel_form=form, status=exc.status)
    messages.success(request, f"{job.name} cancelled.")
    return redirect("web:job", job_id=job.pk)


def _submittable_shares(request: HttpRequest) -> list[tuple[int, str]]:
    shares = share_selectors.submittable_shares(
        every=roles.is_admin(request.user), team_ids=roles.member_team_ids(request.user)
    )
    return [(s.pk, f"{s.queue.name} / {s.name} ({s.team.name})") for s in shares]


def _chosen_share(request: HttpRequest, share_limits: dict[int, list[str]]) -> int | None:
    """The share the form is for (posted, or ``?share=`` in the link), if the user may
    submit to it and it has limits."""
    raw = (request.POST if request.method == "POST" else request.GET).get("share", "")
    if not raw.isdecimal() or len(raw) > 12:
        return None
    share_id = int(raw)
    return share_id if share_id in share_limits else None


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    """Submit a job to one of the user's teams' shares (members, leads, admins)."""
    if not _may_submit_any(request):
        raise DjangoPermissionDenied("Only members and leads of a team, and admins, submit jobs.")
    share_choices = _submittable_shares(request)
    share_limits = share_selectors.limit_types([pk for pk, _ in share_choices])
    # Each preference row lists only the chosen share's types (a share may use only the
    # types it has a limit for); before a share is chosen, those of all the user's shares,
    # each option naming its shares so that the page's script narrows the list at once.
    chosen = _chosen_share(request, share_limits)
    type_shares: dict[str, list[int]] = {}
    for share_id, names in share_limits.items():
        for name in names:
            type_shares.setdefault(name, []).append(share_id)
    type_names = share_limits[chosen] if chosen is not None else sorted(type_shares)
    share_plans = plan_selectors.nameable_plans_of([pk for pk, _ in share_choices])
    plan_choices = plan_selectors.plan_choices(share_plans)
    workload_choices = workload_selectors.choices_for_shares([pk for pk, _ in share_choices])
    status = 200
    if request.method == "POST" and "pick" in request.POST:
        # Without JavaScript: "List this share's instance types" re-shows the form, what
        # was typed kept, the rows narrowed to the chosen share; nothing is submitted.
        kept = {k: v for k, v in request.POST.dict().items() if k in JobSubmitForm.base_fields}
        form = JobSubmitForm(
            initial=kept,
            shares=share_choices,
            type_names=type_names,
            plans=plan_choices,
            workloads=workload_choices,
        )
    elif request.method == "POST":
        form = JobSubmitForm(
            request.POST,
            shares=share_choices,
            type_names=type_names,
            plans=plan_choices,
            workloads=workload_choices,
        )
        if form.is_valid():
            try:
                job = job_services.job_submit(actor=request.user, **form.service_kwargs())
            except ServiceError as exc:
                form.apply_service_errors(exc)
                status = exc.status
            else:
                messages.success(request, f"Job {job.name} submitted.")
                for skipped in (job.template or {}).get("skipped", []):
                    messages.warning(
                        request,
                        f"Template entry {skipped['position']} ({skipped['configuration']}) "
                        f"was skipped: its certification {skipped['why']}.",
                    )
                return redirect("web:job", job_id=job.pk)
        else:
            check_with_service(
                form,
                lambda: job_services.job_submit(actor=request.user, **form.service_kwargs()),
                form.apply_service_errors,
            )
            status = 400
    else:
        initial: dict[str, Any] = {}
        if chosen is not None:
            initial["share"] = chosen
        form = JobSubmitForm(
            initial=initial,
            shares=share_choices,
            type_names=type_names,
            plans=plan_choices,
            workloads=workload_choices,
        )
    context = {
        "form": form,
        "type_shares": {name: " ".join(map(str, ids)) for name, ids in type_shares.items()},
        "share_types": [
            (label, ", ".join(share_limits.get(pk, []))) for pk, label in share_choices
        ],
        "bands": list(priority_selectors.priority_definitions()),
        "share_plans": share_plans,
    }
    return render(request, "jobs/new.html", context, status=status)
