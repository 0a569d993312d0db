"""Capacity plans (docs/scheduling.md#capacity-plans): everyone sees each queue's plans on a
timeline with their usage; admins create, resize and end them through ``services.plans``."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from governance import roles
from governance.models import CapacityPlan, Share
from governance.selectors import capacity as capacity_selectors
from governance.selectors import plans as plan_selectors
from governance.selectors import state_cache
from governance.services import plans as plan_services
from governance.services.errors import ServiceError
from governance.web import fragments
from governance.web.errors import apply_service_errors, check_with_service, field_words
from governance.web.forms_plans import PlanCreateForm, PlanEndForm, PlanResizeForm

# How long the plans page may show a plan's start or end as of (web/fragments.py).
BUCKET_SECONDS = 60


def _share_choices() -> list[tuple[int, str]]:
    return [
        (s.pk, f"{s.queue.name} / {s.name} ({s.team.name})")
        for s in Share.objects.select_related("queue", "team").order_by("queue__name", "name")
    ]


def _create_form(request: HttpRequest) -> PlanCreateForm:
    type_names = [t.name for t in capacity_selectors.instance_types()]
    return PlanCreateForm(
        request.POST if request.method == "POST" else None,
        shares=_share_choices(),
        type_names=type_names,
        initial={"share": request.GET.get("share")},
    )


@login_required
def plan_list(request: HttpRequest) -> HttpResponse:
    """A fragment (web/fragments.py) of the plans (audited) and the running jobs on them
    (their starts and ends are job events): ``state_cache.page_version``; a plan starts
    and ends with time alone (BUCKET_SECONDS). Per rights: admins resize and end them."""
    return fragments.page(
        request,
        "plans",
        "plans/list.html",
        lambda: _list_context(request),
        version=state_cache.page_version(),
        args=[],
        bucket=BUCKET_SECONDS,
    )


def _list_context(request: HttpRequest) -> dict[str, Any]:
    now = timezone.now()
    return {
        "timelines": plan_selectors.queue_timelines(now),
        "is_admin": roles.is_admin(request.user),
        "now": now,
    }


@login_required
def plan_new(request: HttpRequest) -> HttpResponse:
    if not roles.is_admin(request.user):
        return HttpResponseForbidden("Only admins create capacity plans.")
    form = _create_form(request)
    status = 200
    if request.method == "POST":

        def create() -> CapacityPlan:
            data = form.cleaned_data
            share = Share.objects.filter(pk=data["share"]).first() if data.get("share") else None
            return plan_services.plan_create(
                actor=request.user,
                queue=share.queue_id if share else None,
                share=data.get("share"),
                name=data.get("name") or "",
                instance_type=data.get("instance_type") or "",
                count=cast(int, data.get("count")),  # None: the service says so
                start=data.get("start"),
                end=data.get("end"),
                hourly_price=data.get("hourly_price"),
                reason=data.get("reason") or "",
            )

        if form.is_valid():
            try:
                plan = create()
            except ServiceError as exc:
                apply_service_errors(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Capacity plan {plan.name} created.")
                return redirect(f"/plans/#plan-{plan.pk}")
        else:
            check_with_service(form, create)
            status = 400
    return render(request, "plans/new.html", {"form": form}, status=status)


@login_required
@require_POST
def plan_resize(request: HttpRequest, plan_id: int) -> HttpResponse:
    form = PlanResizeForm(request.POST)
    if not form.is_valid():
        for field, problems in form.errors.items():
            messages.error(request, f"{field_words(form, field)}: {' '.join(map(str, problems))}")
        return redirect(f"/plans/#plan-{plan_id}")
    try:
        plan = plan_services.plan_resize(
            actor=request.user,
            plan=plan_id,
            count=form.cleaned_data["count"],
            reason=form.cleaned_data["reason"],
        )
    except ServiceError as exc:
        if exc.status == 403:
            return HttpResponseForbidden("Only admins resize capacity plans.")
        for field, errors in exc.errors.items():
            messages.error(request, f"{field_words(form, field)}: {' '.join(errors)}")
    else:
        messages.success(request, f"Plan {plan.name} now has {plan.count} instances.")
    return redirect(f"/plans/#plan-{plan_id}")


@login_required
@require_POST
def plan_end(request: HttpRequest, plan_id: int) -> HttpResponse:
    form = PlanEndForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Reason: say why the plan ends (it goes to the audit trail).")
        return redirect(f"/plans/#plan-{plan_id}")
    try:
        plan = plan_services.plan_end(
            actor=request.user, plan=plan_id, reason=form.cleaned_data["reason"]
        )
    except ServiceError as exc:
        if exc.status == 403:
            return HttpResponseForbidden("Only admins end capacity plans.")
        for field, errors in exc.errors.items():
            messages.error(request, f"{field_words(form, field)}: {' '.join(errors)}")
    else:
        messages.success(
            request,
            f"Plan {plan.name} ended. Jobs still on it are stopped at the next cycle and "
            "may start on their other preferences.",
        )
    return redirect(f"/plans/#plan-{plan_id}")
