"""Priority definitions: everyone reads the bands; admins create, edit and delete them
through ``services.priorities`` (an overlap error lands beside min/max)."""

from __future__ import annotations

import math
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from governance import roles
from governance.models import PriorityDefinition
from governance.models.priorities import MAX_PRIORITY, BandRole
from governance.selectors import priorities as priority_selectors
from governance.selectors import state_cache
from governance.selectors import teams as team_selectors
from governance.services import priorities as priority_services
from governance.services.errors import ServiceError
from governance.web import fragments
from governance.web.errors import apply_service_errors, check_with_service
from governance.web.forms_governance import PriorityDefinitionForm
from governance.web.nav import request_roles
from governance.web.presenters import governance as sel

ROLE_LABELS = dict(BandRole.choices)


def strip_segments(bands: list[PriorityDefinition]) -> list[dict[str, Any]]:
    """The 0..9999 strip: bands and the gaps between them. Widths are on a compressed
    (logarithmic) scale so a band of 100 values stays visible next to one of 9000."""
    segments: list[dict[str, Any]] = []
    cursor = 0
    for band in bands:
        if band.min_priority > cursor:
            segments.append({"band": None, "low": cursor, "high": band.min_priority - 1})
        segments.append({"band": band, "low": band.min_priority, "high": band.max_priority})
        cursor = band.max_priority + 1
    if cursor <= MAX_PRIORITY:
        segments.append({"band": None, "low": cursor, "high": MAX_PRIORITY})
    for index, segment in enumerate(segments):
        segment["grow"] = round(math.log10(segment["high"] - segment["low"] + 2) * 10, 1)
        segment["tone"] = index % 4
    return segments


@login_required
def priority_list(request: HttpRequest) -> HttpResponse:
    """A fragment (web/fragments.py) of the bands (every row: ``table_version``) and the
    teams' leads (audited: ``state_cache.page_version``); per rights (the highest
    priority the viewer's roles and teams may use, whom they ask for more)."""
    return fragments.page(
        request,
        "priorities",
        "priorities/list.html",
        lambda: _list_context(request),
        version="|".join(
            (state_cache.page_version(), state_cache.table_version(PriorityDefinition))
        ),
        args=[],
    )


def _list_context(request: HttpRequest) -> dict[str, Any]:
    bands = list(priority_selectors.priority_definitions())
    for band in bands:
        band.roles = [ROLE_LABELS.get(r, r) for r in band.usable_by]  # type: ignore[attr-defined]
    held = request_roles(request)
    team_ids = sorted(held.lead_team_ids or held.member_team_ids)
    mine = priority_selectors.max_usable_priority(request.user, team_ids[0] if team_ids else None)
    lead_of = held.lead_team_ids
    return {
        "bands": bands,
        "segments": strip_segments(bands),
        "is_admin": held.admin,
        "my_max": mine,
        # Only team leads file exceptions: the others are told whom to ask.
        "is_lead": bool(lead_of),
        "my_leads": ([] if lead_of else team_selectors.lead_names(held.member_team_ids)),
    }


def _form_values(form: PriorityDefinitionForm) -> dict[str, Any]:
    """The service's arguments; a field that did not parse is None (``check_with_service``
    then still checks the others)."""
    data = form.cleaned_data
    return {
        "name": data.get("name"),
        "min_priority": data.get("min_priority"),
        "max_priority": data.get("max_priority"),
        "criteria": data.get("criteria") or "",
        "usable_by": list(data.get("usable_by") or []),
        "exception_owner": data.get("exception_owner") or None,
    }


@login_required
def priority_new(request: HttpRequest) -> HttpResponse:
    if not roles.is_admin(request.user):
        return HttpResponseForbidden("Only admins define priority bands.")
    form = PriorityDefinitionForm(request.POST or None, usernames=sel.usernames())
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                band = priority_services.priority_definition_create(
                    actor=request.user, **_form_values(form)
                )
            except ServiceError as error:
                apply_service_errors(form, error)
                status = error.status
            else:
                messages.success(request, f"Band {band.name} created.")
                return redirect("web:priorities")
        else:
            check_with_service(
                form,
                lambda: priority_services.priority_definition_create(
                    actor=request.user, **_form_values(form)
                ),
            )
    return render(request, "priorities/form.html", {"form": form, "band": None}, status=status)


@login_required
def priority_edit(request: HttpRequest, pk: int) -> HttpResponse:
    if not roles.is_admin(request.user):
        return HttpResponseForbidden("Only admins define priority bands.")
    band = priority_selectors.priority_definitions().filter(pk=pk).first()
    if band is None:
        raise Http404("No such band.")
    initial = {
        "name": band.name,
        "min_priority": band.min_priority,
        "max_priority": band.max_priority,
        "criteria": band.criteria,
        "usable_by": band.usable_by,
        "exception_owner": band.exception_owner.username if band.exception_owner else "",
    }
    form = PriorityDefinitionForm(request.POST or None, initial=initial, usernames=sel.usernames())
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                priority_services.priority_definition_update(
                    actor=request.user,
                    definition=band.pk,
                    changes=_form_values(form),
                    reason=form.cleaned_data["reason"],
                )
            except ServiceError as error:
                apply_service_errors(form, error)
                status = error.status
            else:
                messages.success(request, f"Band {form.cleaned_data['name']} saved.")
                return redirect("web:priorities")
        else:
            check_with_service(
                form,
                lambda: priority_services.priority_definition_update(
                    actor=request.user,
                    definition=band.pk,
                    changes=_form_values(form),
                    reason=form.cleaned_data.get("reason") or "",
                ),
            )
    return render(request, "priorities/form.html", {"form": form, "band": band}, status=status)


@login_required
@require_POST
def priority_delete(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        priority_services.priority_definition_delete(
            actor=request.user, definition=pk, reason=request.POST.get("reason", "")
        )
    except ServiceError as error:
        if error.status == 404:
            raise Http404("No such band.") from error
        if error.status == 403:
            return HttpResponseForbidden("Only admins define priority bands.")
        messages.error(request, "; ".join(m for ms in error.errors.values() for m in ms))
        return redirect("web:priorities")
    messages.success(request, "Band deleted. Jobs keep their numeric priority.")
    return redirect("web:priorities")
