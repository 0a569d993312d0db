"""Queue pages: the list of queues, and one queue with its shares, jobs and why jobs wait."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.safestring import SafeString

from governance.models import JobQueue, JobState
from governance.selectors import capacity as capacity_selectors
from governance.selectors import insight, scheduling, state_cache
from governance.selectors import jobs as job_selectors
from governance.selectors import plans as plan_selectors
from governance.selectors import shares as share_selectors
from governance.web import charts, fragments, regions
from governance.web.links import url_pattern
from governance.web.presenters import jobs as web_jobs
from governance.web.presenters import overview as web_overview

PAGE_SIZE = 50
# The forecast error on the queue page covers jobs that started this recently.
FORECAST_ERROR_WINDOW = timedelta(days=30)
QUEUE_ROW_COLUMNS = (
    "id",
    "share_id",
    "queue_id",
    "name",
    "kind",
    "state",
    "priority",
    "preferences",
    "borrowed",
    "submitted_at",
    "started_at",
    "preemptions",
    "may_borrow",
    "share__name",
    "share__team__name",
    "instance_type__name",
    "plan__name",
)


def _page(request: HttpRequest, qs: Any, param: str) -> Page:
    return Paginator(qs, PAGE_SIZE).get_page(request.GET.get(param))


@login_required
def queue_list(request: HttpRequest) -> HttpResponse:
    # Every queue's figures, cached under their state (state_cache), as the overview does.
    blocks = state_cache.cached(
        f"usage-blocks:{state_cache.queue_state_fingerprint()}",
        lambda: web_overview.usage_blocks(web_overview.overview_queues()),
    )
    return render(request, "queues/list.html", {"queues": blocks})


def _queue_or_404(queue_id: int) -> JobQueue:
    queue = capacity_selectors.queues().filter(pk=queue_id).first()
    if queue is None:
        raise Http404("No such queue.")
    return queue


# The page is a fragment (web/fragments.py) of what it reads: the queue, its shares and
# limits, capacity plans and Slurm settings, its live usage (its state fingerprint:
# heartbeats rewrite running jobs without an event), the jobs behind the forecast error
# (their starts are job events) and what is audited (``state_cache.page_version``).
# The plans' timeline and the forecast error's window move with time alone
# (BUCKET_SECONDS). Two holes are written at each serving: the job tables (cached under
# the fingerprint and the generation of the reasons they show, below) and the usage
# history. The same for every viewer.
BUCKET_SECONDS = 60


@login_required
def queue_detail(request: HttpRequest, queue_id: int) -> HttpResponse:
    # One read of the queue's state, first (what is cached under it is then never older
    # than it), for the queue itself, the live region, the reasons and the job tables
    # (all cached under it).
    fingerprint = state_cache.queue_state_fingerprint(queue_id)
    # The queue's row, its capacity rows and their types are among the rows the
    # fingerprint digests: kept under it, one cache read where the queue's two queries
    # and its models cost the page 1 ms of CPU (None while there is no such queue); and
    # under the release, whose models unpickle it.
    queue = state_cache.cached(
        f"queue-row:{fragments.code_version()}:{fingerprint}",
        lambda: capacity_selectors.queues().filter(pk=queue_id).first(),
    )
    if queue is None:
        raise Http404("No such queue.")
    return fragments.page(
        request,
        "queue",
        "queues/detail.html",
        lambda: _detail_context(queue, fingerprint),
        version=f"{fingerprint}|{state_cache.page_version()}",
        args=[queue.pk],
        viewer=fragments.Viewer.EVERYONE,
        bucket=BUCKET_SECONDS,
        holes={
            "jobs": lambda: _jobs_html(request, queue, fingerprint)[0],
            "history": lambda: charts.history_html(
                request, queue_id=queue.pk, share_ids=None, subject=f"Queue {queue.name}"
            ),
        },
        around={"queue": queue},
    )


def _detail_context(queue: JobQueue, fingerprint: str) -> dict[str, Any]:
    shares = list(share_selectors.shares().filter(queue=queue).order_by("name"))
    return {
        "queue": queue,
        "queue_live_html": queue_live_html(queue, fingerprint),
        "shares": [{"share": s, "limits": share_selectors.limits_of(s)} for s in shares],
        "jobs_html": fragments.hole("jobs"),
        "history_html": fragments.hole("history"),
        "plan_timeline": plan_selectors.queue_timeline(queue, timezone.now()),
        "forecast_error": insight.forecast_error(
            queue_id=queue.pk, since=timezone.now() - FORECAST_ERROR_WINDOW
        ),
        # Only queues run by Slurm pay the query: whether their executor is paused.
        "slurm": capacity_selectors.slurm_config(queue) if queue.executor == "slurm" else None,
    }


# The running and pending tables show only the queue's active jobs, their shares, teams
# and instance types (all in the fingerprint) and the engine's reasons (cached under the
# fingerprint with a generation token that changes whenever they are asked again). So
# their HTML is cached under both and the requested page numbers: a page view with
# nothing changed skips the two counts, the two job queries and building 100 rows. The
# relative times are left as slots and written at each request (web_time.fill_slots).
JOBS_HTML_VERSION = 3  # 2: the plan a job runs on; 3: never-start notes


def _jobs_html(
    request: HttpRequest, queue: JobQueue, fingerprint: str
) -> tuple[SafeString, dict[str, Any]]:
    """The tables' HTML, and the context they were rendered from (empty when cached)."""
    pages = "|".join(request.GET.get(p, "")[:12] for p in ("running_page", "pending_page"))

    def key(generation: str) -> str:
        return f"queue-jobs:{JOBS_HTML_VERSION}:{fingerprint}:{generation}:{pages}"

    generation = scheduling.explain_generation(queue.pk, fingerprint)
    if generation is not None and (html := regions.lookup(key(generation))) is not None:
        return html, {}
    served: list[str] = []  # the generation of the reasons shown, if cached
    context = _jobs_context(request, queue, fingerprint, served)
    rendered = regions.render_with_slots("queues/detail.html#jobs", context, request)
    if served:
        regions.store(key(served[0]), rendered, scheduling.EXPLAIN_MAX_AGE)
    return regions.fill(rendered), context


def _jobs_context(
    request: HttpRequest, queue: JobQueue, fingerprint: str, generation: list[str]
) -> dict[str, Any]:
    # Only what the rows show (templates/queues/detail.html): 100 rows of six joined
    # models each cost more to build than to fetch.
    queue_jobs = (
        job_selectors.jobs()
        .select_related(None)
        .select_related("share__team", "instance_type", "plan")
        .only(*QUEUE_ROW_COLUMNS)
        .filter(queue=queue)
    )
    running = _page(
        request,
        queue_jobs.filter(state=JobState.RUNNING).order_by("-priority", "started_at", "id"),
        "running_page",
    )
    pending = _page(
        request,
        queue_jobs.filter(state=JobState.PENDING).order_by("-priority", "submitted_at", "id"),
        "pending_page",
    )
    # Only this page's pending jobs: reasons are cached per job (explain_jobs).
    reasons = scheduling.explain_jobs(
        queue.pk,
        [job.pk for job in pending.object_list],
        fingerprint=fingerprint,
        generation=generation,
    )
    forecasts, _ = scheduling.forecast_jobs(
        queue.pk, [job.pk for job in pending.object_list], fingerprint=fingerprint
    )
    job_url, share_url = url_pattern("web:job"), url_pattern("web:share")
    for job in [*running.object_list, *pending.object_list]:
        job.page_url = job_url.format(job.pk)
        job.share_url = share_url.format(job.share_id)
    # Jobs that can never start as configured say so, with what would let them.
    never = scheduling.never_starting(pending.object_list)
    pending_rows = [
        {
            "job": job,
            "reasons": web_jobs.with_reason_words(
                scheduling.with_blockers(reasons.get(job.pk) or [], never.get(job.pk))
            ),
            "never": never.get(job.pk),
            "forecast": forecasts.get(job.pk),
        }
        for job in pending.object_list
    ]
    return {
        "queue": queue,
        "running": running,
        "pending": pending,
        "pending_rows": pending_rows,
    }


def queue_live_html(queue: JobQueue | int, fingerprint: str | None = None) -> SafeString:
    """The queue page's live usage region, cached under the queue's state (``state_cache``):
    the page embeds it and its poll endpoint serves it, reading the queue (or, given its
    id, a 404 when there is none) only to render it afresh."""
    queue_id = queue if isinstance(queue, int) else queue.pk

    def context() -> dict[str, Any]:
        found = _queue_or_404(queue) if isinstance(queue, int) else queue
        return {"queue": found, "q": web_overview.usage_blocks([found])[0]}

    return regions.template_region(
        f"queue-usage-html:{fingerprint or state_cache.queue_state_fingerprint(queue_id)}",
        "queues/detail.html#queue_live",
        context,
    )


@login_required
def queue_usage_partial(request: HttpRequest, queue_id: int) -> HttpResponse:
    """Polled every 2 s (see ``queue_live_html``): when nothing changed, the queue's
    record version (one query) and two cache reads (its fingerprint, the region)."""
    return HttpResponse(queue_live_html(queue_id))
