"""Queue pages: the list of queues, and one queue with its shares, jobs and why jobs wait."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from governance.models import JobQueue, JobState
from governance.selectors import jobs as job_selectors
from governance.selectors import shares as share_selectors
from governance.selectors import web_jobs, web_overview

PAGE_SIZE = 50


def _page(request: HttpRequest, qs: Any, param: str) -> Page:
    return Paginator(qs, PAGE_SIZE).get_page(request.GET.get(param))


@login_required
def queue_list(request: HttpRequest) -> HttpResponse:
    queues = web_overview.overview_queues()
    blocks = web_overview.usage_blocks(queues)
    return render(request, "queues/list.html", {"queues": blocks})


def _queue_or_404(queue_id: int) -> JobQueue:
    queue = JobQueue.objects.filter(pk=queue_id).first()
    if queue is None:
        raise Http404("No such queue.")
    return queue


@login_required
def queue_detail(request: HttpRequest, queue_id: int) -> HttpResponse:
    queue = _queue_or_404(queue_id)
    block = web_overview.usage_blocks([queue])[0]
    shares = list(share_selectors.shares().filter(queue=queue).order_by("name"))
    queue_jobs = job_selectors.jobs().filter(queue=queue)
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
    reasons = web_jobs.explain_queue(queue.pk)
    pending_rows = [
        {
            "job": job,
            "reasons": web_jobs.with_reason_words((reasons or {}).get(job.pk)),
        }
        for job in pending.object_list
    ]
    context = {
        "queue": queue,
        "q": block,
        "shares": [{"share": s, "limits": share_selectors.limits_of(s)} for s in shares],
        "running": running,
        "pending": pending,
        "pending_rows": pending_rows,
        "reasons_available": reasons is not None,
    }
    return render(request, "queues/detail.html", context)


@login_required
def queue_usage_partial(request: HttpRequest, queue_id: int) -> HttpResponse:
    queue = _queue_or_404(queue_id)
    block = web_overview.usage_blocks([queue])[0]
    return render(request, "queues/detail.html#queue_live", {"queue": queue, "q": block})
