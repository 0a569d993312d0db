"""The workload pages (docs/workloads.md): a workload's interruption class, recovery
assumptions, recovery status and the history of that status with each change's evidence
job; the form by which a team's leads (and admins) add a workload or change one."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from governance.models import Interruption, Team, Workload
from governance.selectors import workloads as workload_selectors
from governance.services import workloads as workload_services
from governance.services.errors import ServiceError
from governance.web import certifications as certification_pages
from governance.web.errors import apply_service_errors


class WorkloadForm(forms.Form):
    name = forms.CharField(
        max_length=workload_services.NAME_MAX_LENGTH,
        help_text="Unique in the team, e.g. vision/detector-finetune.",
    )
    interruption = forms.ChoiceField(
        choices=Interruption.choices,
        help_text="Protected: its jobs never borrow and are never stopped for priority.",
    )
    recovery_assumptions = forms.CharField(
        required=False,
        max_length=workload_services.TEXT_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="What a resume needs (checkpoint location, data) and how output is validated.",
    )


@login_required
def workload_detail(request: HttpRequest, workload_id: int) -> HttpResponse:
    # With its certified configurations and template (web/certifications.py).
    return certification_pages.workload_page(request, workload_id)


def _form_page(
    request: HttpRequest, team: Team, workload: Workload | None, initial: dict[str, Any]
) -> HttpResponse:
    if not workload_services.may_edit(request.user, team.pk):
        raise DjangoPermissionDenied(f"Only leads of team {team.name} and admins edit workloads.")
    form = WorkloadForm(request.POST if request.method == "POST" else None, initial=initial)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                if workload is None:
                    workload = workload_services.workload_create(
                        actor=request.user, team=team, **data
                    )
                else:
                    workload = workload_services.workload_update(
                        actor=request.user, workload=workload, changes=data
                    )
            except ServiceError as exc:
                apply_service_errors(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Workload {workload.name} saved.")
                return redirect("web:workload", workload_id=workload.pk)
        else:
            status = 400
    context = {"form": form, "team": team, "workload": workload}
    return render(request, "workloads/form.html", context, status=status)


@login_required
def workload_new(request: HttpRequest, team_id: int) -> HttpResponse:
    team = Team.objects.filter(pk=team_id).first()
    if team is None:
        raise Http404("No such team.")
    return _form_page(request, team, None, {"interruption": Interruption.TOLERANT})


@login_required
def workload_edit(request: HttpRequest, workload_id: int) -> HttpResponse:
    workload = workload_selectors.workloads().filter(pk=workload_id).first()
    if workload is None:
        raise Http404("No such workload.")
    initial = {
        "name": workload.name,
        "interruption": workload.interruption,
        "recovery_assumptions": workload.recovery_assumptions,
    }
    return _form_page(request, workload.team, workload, initial)
