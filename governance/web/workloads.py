"""The workload page: its interruption class, recovery assumptions, recovery status and
the history of that status with each change's evidence job (docs/workloads.md)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from governance.selectors import workloads as workload_selectors


@login_required
def workload_detail(request: HttpRequest, workload_id: int) -> HttpResponse:
    workload = workload_selectors.workloads().filter(pk=workload_id).first()
    if workload is None:
        raise Http404("No such workload.")
    context = {
        "workload": workload,
        "history": workload_selectors.history(workload.pk),
        "recent_jobs": workload_selectors.recent_jobs(workload.pk),
    }
    return render(request, "workloads/detail.html", context)
