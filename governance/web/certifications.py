"""Certified configurations on the workload page (docs/workloads.md#certified-configurations):
the configurations side by side with their benchmark, the cost of a run, status, expiry
and drift; the forms by which a lead proposes one, a reviewer certifies or rejects it, it
is revoked; and the page where a lead builds the workload's preference template."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from governance import roles
from governance.models import CapacityPlan, Certification, InstanceType, Workload
from governance.selectors import certifications as cert_selectors
from governance.selectors import state_cache
from governance.selectors import workloads as workload_selectors
from governance.services import certifications as cert_services
from governance.services import templates as template_services
from governance.services import workloads as workload_services
from governance.services.errors import ServiceError
from governance.web import fragments
from governance.web.errors import apply_service_errors, check_with_service
from governance.web.forms_certifications import DecideForm, ProposeForm, RevokeForm, TemplateForm


def _workload(workload_id: int) -> Workload:
    workload = workload_selectors.workloads().filter(pk=workload_id).first()
    if workload is None:
        raise Http404("No such workload.")
    return workload


def propose_form(workload: Workload, data: Any = None) -> ProposeForm:
    types = list(InstanceType.objects.order_by("name").values_list("name", flat=True))
    plans = list(
        CapacityPlan.objects.filter(share__team_id=workload.team_id, end__gt=timezone.now())
        .order_by("name")
        .values_list("name", flat=True)
    )
    return ProposeForm(data, types=types, plans=plans)


def context(
    request: HttpRequest,
    workload: Workload,
    *,
    proposal: ProposeForm | None = None,
    failed: tuple[int, forms.Form] | None = None,
) -> dict[str, Any]:
    """The workload page's configurations, template and forms; ``failed`` is a decision
    or revocation form (of that certification) whose problems are to be shown."""
    rows = []
    for row in cert_selectors.configurations(workload.pk):
        cert = row.certification
        entry: dict[str, Any] = {"row": row, "decide": None, "revoke": None}
        if cert is not None:
            failed_form = failed[1] if failed is not None and failed[0] == cert.pk else None
            if cert.state == "proposed" and cert_services.may_decide(request.user, cert):
                entry["decide"] = (
                    failed_form if isinstance(failed_form, DecideForm) else DecideForm()
                )
            if cert.state == "certified" and cert_services.may_revoke(request.user, cert):
                entry["revoke"] = (
                    failed_form if isinstance(failed_form, RevokeForm) else RevokeForm()
                )
        rows.append(entry)
    may_propose = cert_services.may_propose(request.user, workload.team_id)
    if proposal is None and may_propose:
        proposal = propose_form(workload)
    return {
        "configurations": rows,
        "drifting": [e["row"] for e in rows if e["row"].drift.get("drifting")],
        "template": cert_selectors.template_of(workload.pk),
        "may_propose": may_propose,
        "propose_form": proposal
        if proposal is not None
        else (propose_form(workload) if may_propose else None),
    }


def _detail_context(request: HttpRequest, workload: Workload, **forms_: Any) -> dict[str, Any]:
    return {
        "workload": workload,
        "history": workload_selectors.history(workload.pk),
        "recent_jobs": workload_selectors.recent_jobs(workload.pk),
        "may_edit": workload_services.may_edit(request.user, workload.team_id),
        **context(request, workload, **forms_),
    }


def _detail(request: HttpRequest, workload: Workload, status: int, **forms_: Any) -> HttpResponse:
    """The page with a form's problems: rendered for this request, not cached."""
    data = _detail_context(request, workload, **forms_)
    return render(request, "workloads/detail.html", data, status=status)


# The page (as a GET shows it, with no form's problems) is a fragment (web/fragments.py)
# of what it reads: the workload, its recovery history, template, recent jobs and
# certifications with their runs, the instance types' prices and the team's plans, all
# written with a job event or an audit entry (``page_version``), except the
# certifications' drift and reminder marks (``rows_version`` of the workload's
# certifications). A certification's status and the plans offered change with time
# alone (BUCKET_SECONDS). Per user: a proposer may not decide their own proposal.
BUCKET_SECONDS = 60


def workload_page(request: HttpRequest, workload_id: int) -> HttpResponse:
    """The workload page (GET)."""
    workload = _workload(workload_id)
    version = state_cache.page_version()
    certs = state_cache.rows_version(Certification, "workload", workload.pk)
    body = fragments.fragment(
        request,
        "workload",
        template="workloads/detail.html#body",
        context=lambda: _detail_context(request, workload),
        version=f"{version}|{certs}",
        args=[workload.pk],
        viewer=fragments.Viewer.USER,
        bucket=BUCKET_SECONDS,
    )
    return render(request, "workloads/detail.html", {"workload": workload, "body": body})


@login_required
@require_POST
def certification_propose(request: HttpRequest, workload_id: int) -> HttpResponse:
    workload = _workload(workload_id)
    form = propose_form(workload, request.POST)

    def call() -> Certification:
        return cert_services.certification_propose(
            actor=request.user, workload=workload, **form.service_kwargs()
        )

    if form.is_valid():
        try:
            cert = call()
        except ServiceError as exc:
            apply_service_errors(form, exc)
            return _detail(request, workload, exc.status, proposal=form)
        messages.success(request, f"{cert.configuration} proposed; a reviewer will decide.")
        return redirect(f"/workloads/{workload.pk}/#configurations")
    check_with_service(form, call)
    return _detail(request, workload, 400, proposal=form)


def _certification(cert_id: int) -> Certification:
    cert = cert_selectors.certifications().filter(pk=cert_id).first()
    if cert is None:
        raise Http404("No such certification.")
    return cert


def _act_on(
    request: HttpRequest,
    cert_id: int,
    form: DecideForm | RevokeForm,
    act: Callable[[Certification, dict[str, Any]], Certification],
) -> HttpResponse:
    """A decision or revocation: done, back to the workload's configurations; refused,
    the workload page again with the form's problems beside that configuration."""
    cert = _certification(cert_id)
    if form.is_valid():
        try:
            cert = act(cert, form.cleaned_data)
        except ServiceError as exc:
            apply_service_errors(form, exc)
            return _detail(request, cert.workload, exc.status, failed=(cert.pk, form))
        messages.success(request, f"{cert.configuration} {cert.state}.")
        return redirect(f"/workloads/{cert.workload_id}/#configurations")
    return _detail(request, cert.workload, 400, failed=(cert.pk, form))


@login_required
@require_POST
def certification_decide(request: HttpRequest, cert_id: int) -> HttpResponse:
    return _act_on(
        request,
        cert_id,
        DecideForm(request.POST),
        lambda cert, data: cert_services.certification_decide(
            actor=request.user,
            certification=cert,
            certify=data["decision"] == "certify",
            note=data.get("note") or "",
        ),
    )


@login_required
@require_POST
def certification_revoke(request: HttpRequest, cert_id: int) -> HttpResponse:
    return _act_on(
        request,
        cert_id,
        RevokeForm(request.POST),
        lambda cert, data: cert_services.certification_revoke(
            actor=request.user, certification=cert, reason=data.get("reason")
        ),
    )


@login_required
def workload_template(request: HttpRequest, workload_id: int) -> HttpResponse:
    """The template builder: certified configurations in order, each with its reason."""
    workload = _workload(workload_id)
    if not workload_services.may_edit(request.user, workload.team_id) and not roles.is_admin(
        request.user
    ):
        raise DjangoPermissionDenied(f"Only leads of team {workload.team.name} and admins.")
    now = timezone.now()
    certified = [
        (c.pk, f"{c.configuration} ({c.runtime} s benchmark)")
        for c in cert_selectors.of_workload(workload.pk)
        if c.in_force(now)
    ]
    initial: dict[str, Any] = {}
    current = cert_selectors.template_of(workload.pk)
    if current is not None:
        initial = {
            "max_pending": current.max_pending,
            "deadline_offset": current.deadline_offset,
            "max_cost": current.max_cost,
        }
        for i, entry in enumerate(current.entries.all()):
            initial[f"entry_{i}"] = entry.certification_id
            initial[f"reason_{i}"] = entry.reason
    form = TemplateForm(
        request.POST if request.method == "POST" else None, initial=initial, certified=certified
    )
    status = 200
    if request.method == "POST":

        def call() -> Any:
            return template_services.template_set(
                actor=request.user, workload=workload, **form.service_kwargs()
            )

        if form.is_valid():
            try:
                call()
            except ServiceError as exc:
                apply_service_errors(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Template of {workload.name} saved.")
                return redirect(f"/workloads/{workload.pk}/#template")
        else:
            check_with_service(form, call)
            status = 400
    return render(
        request,
        "workloads/template.html",
        {"workload": workload, "form": form, "certified": certified},
        status=status,
    )
