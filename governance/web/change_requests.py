"""Share change request pages: the list (admins review pending ones on top), filing from
the share page (leads of its team), the detail with both previews, and the decisions
(approve, reject, withdraw), each a POST calling one service."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from governance import roles
from governance.models import ChangeRequestState, ShareChangeRequest
from governance.selectors import change_requests as cr_selectors
from governance.selectors import scheduling, state_cache
from governance.selectors import shares as share_selectors
from governance.services import change_requests as cr_services
from governance.services import shares as share_services
from governance.services.errors import ServiceError, ValidationFailed
from governance.web import fragments
from governance.web.errors import apply_service_errors
from governance.web.forms_governance import DecisionForm
from governance.web.forms_shares import ChangeRequestForm
from governance.web.presenters.overview import RULE_WORDS
from governance.web.shares import _comparison, _share_or_404, _show

PAGE_SIZE = 50
FIELD_LABELS = {
    "limits": "Limits",
    "policy": "Policy",
    "borrow_limit": "Borrow limit",
    "in_share_preemption": "In-share preemption",
    "preemption_retries": "Preemption retries",
    "borrow_requires_verified_recovery": "Borrowing requires verified recovery",
    "enabled": "Enabled",
    "certified_only": "Certified configurations only",
    "name": "Name",
    "team": "Team",
}


def _with_words(preview: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored preview with each job's rule in words (a copy: the row is kept)."""
    if not preview:
        return preview
    out: dict[str, Any] = dict(preview)
    for key in ("preempted", "reclaimable", "started"):
        out[key] = [
            {**row, "rule_words": RULE_WORDS.get(row.get("rule", ""), row.get("rule", ""))}
            for row in preview.get(key, [])
        ]
    return out


@login_required
def change_request_list(request: HttpRequest) -> HttpResponse:
    """Every request (filter by state); admins get the pending ones to review on top.
    A fragment (web/fragments.py) of the requests, their shares and requesters, all
    audited (``state_cache.page_version``); per rights (admins review)."""
    return fragments.page(
        request,
        "change-requests",
        "change_requests/list.html",
        lambda: _list_context(request),
        version=state_cache.page_version(),
    )


def _list_context(request: HttpRequest) -> dict[str, Any]:
    state = request.GET.get("state", "")
    listing = cr_selectors.change_requests()
    if state in ChangeRequestState.values:
        listing = listing.filter(state=state)
    page = Paginator(listing, PAGE_SIZE).get_page(request.GET.get("page"))
    context: dict[str, Any] = {
        "page": page,
        "state": state,
        "states": ChangeRequestState.choices,
        "reviewing": roles.is_admin(request.user),
    }
    if context["reviewing"]:
        context["review_queue"] = list(
            cr_selectors.change_requests().filter(state=ChangeRequestState.PENDING)[:PAGE_SIZE]
        )
    return context


@login_required
def change_request_new(request: HttpRequest, share_id: int) -> HttpResponse:
    """A lead of the share's team proposes new settings, with the editor's preview."""
    share = _share_or_404(share_id)
    if not roles.is_lead_of(request.user, share.team_id):
        return HttpResponseForbidden(f"Only leads of team {share.team.name} request changes.")
    type_names = share_selectors.queue_type_names(share.queue_id)
    current = share_services.share_snapshot(share)
    status = 200
    context: dict[str, Any] = {"share": share}
    if request.method == "POST":
        form = ChangeRequestForm(request.POST, type_names=type_names)
        if form.is_valid():
            proposed = form.proposed(current)
            if "preview" in request.POST:
                context["diff"] = [r for r in _comparison(current, proposed) if r["differs"]]
                try:
                    context["preview"] = _with_words(
                        scheduling.change_request_preview(share, proposed)
                    )
                except ServiceError as error:
                    apply_service_errors(form, error)
            else:
                try:
                    cr = cr_services.change_request_file(
                        actor=request.user,
                        share=share.pk,
                        changes=proposed,
                        justification=form.cleaned_data["justification"],
                    )
                except ServiceError as error:
                    _apply(form, error)
                    status = error.status
                else:
                    messages.success(
                        request, f"Change request {cr.pk} filed; an admin will decide it."
                    )
                    return redirect("web:change-request", cr.pk)
        else:
            status = 400
    else:
        form = ChangeRequestForm(
            initial=ChangeRequestForm.initial_for(share, share_selectors.limits_of(share)),
            type_names=type_names,
        )
    context["form"] = form
    return render(request, "change_requests/new.html", context, status=status)


def _apply(form: ChangeRequestForm, error: ServiceError) -> None:
    """Service errors beside the fields; ``changes`` (nothing proposed) above the form."""
    if isinstance(error, ValidationFailed) and "changes" in error.errors:
        for message in error.errors.pop("changes"):
            form.add_error(None, message)
    apply_service_errors(form, error)


def _detail_context(request: HttpRequest, cr: ShareChangeRequest) -> dict[str, Any]:
    share = cr.share
    current = share_services.share_snapshot(share)
    user = request.user
    pending = cr.state == ChangeRequestState.PENDING
    may_decide = pending and roles.is_admin(user) and cr.requester_id != user.pk
    proposed_rows = [
        {
            "label": FIELD_LABELS.get(field, field),
            "at_filing": _show(field, cr.base.get(field)),
            "proposed": _show(field, value),
        }
        for field, value in cr.proposed.items()
    ]
    context: dict[str, Any] = {
        "cr": cr,
        "proposed_rows": proposed_rows,
        "preview": _with_words(cr.preview),
        "decision_preview": _with_words(cr.decision_preview),
        "may_decide": may_decide,
        "may_withdraw": pending and cr.requester_id == user.pk,
        "history": cr_selectors.change_request_history(cr),
        "share_version": share.version,
    }
    if pending:
        changed = [
            {
                "label": FIELD_LABELS.get(c["field"], c["field"]),
                "at_filing": _show(c["field"], c["at_filing"]),
                "now": _show(c["field"], c["now"]),
            }
            for c in cr_services.changes_since(cr.base, current)
        ]
        context["changed_since_filing"] = changed
        context["share_changed"] = share.version != cr.base_version
        if may_decide:
            try:
                context["current_preview"] = _with_words(
                    scheduling.change_request_preview(share, cr.proposed)
                )
            except ServiceError as error:
                context["current_preview_errors"] = error.errors
    return context


@login_required
def change_request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    cr = cr_selectors.change_requests().filter(pk=pk).first()
    if cr is None:
        raise Http404("No such change request.")
    return render(
        request,
        "change_requests/detail.html",
        {**_detail_context(request, cr), "form": DecisionForm()},
    )


ACTIONS = {
    "approve": (cr_services.change_request_approve, "approved"),
    "reject": (cr_services.change_request_reject, "rejected"),
    "withdraw": (cr_services.change_request_withdraw, "withdrawn"),
}


@login_required
@require_POST
def change_request_decide(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Approve (confirming the share's current version when it changed since the
    filing), reject or withdraw with a note. On error the detail page comes back with
    the message and the service's status; nothing changed."""
    if action not in ACTIONS:
        raise Http404("Unknown action.")
    service, done = ACTIONS[action]
    form = DecisionForm(request.POST)
    form.is_valid()
    kwargs: dict[str, Any] = {"note": form.cleaned_data.get("note", "")}
    raw = request.POST.get("confirm_version", "")
    if action == "approve" and raw.isdecimal() and len(raw) < 10:
        kwargs["confirm_version"] = int(raw)
    try:
        service(actor=request.user, request=pk, **kwargs)
    except ServiceError as error:
        if error.status == 404:
            raise Http404("No such change request.") from error
        cr = cr_selectors.change_requests().get(pk=pk)
        for field in ("confirm_version", "state", "detail"):
            for message in error.errors.pop(field, []):
                form.add_error(None, message)
        apply_service_errors(form, error)
        context = {**_detail_context(request, cr), "form": form}
        return render(request, "change_requests/detail.html", context, status=error.status)
    messages.success(request, f"Change request {pk} {done}.")
    return redirect("web:change-request", pk)
