"""Priority exceptions pages: the list with its review queue, filing, the detail with
its history, and the decisions (approve, reject, withdraw) — each a POST calling one
service."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from governance import roles
from governance.models import ExceptionState, PriorityException
from governance.models.jobs import ACTIVE_STATES
from governance.selectors import state_cache
from governance.services import exceptions as exception_services
from governance.services.errors import ServiceError
from governance.web import agreements as agreement_pages
from governance.web import fragments
from governance.web.errors import apply_service_errors, check_with_service
from governance.web.forms_governance import (
    DecisionForm,
    ExceptionFileForm,
    ExceptionFilterForm,
    htmx_target,
)
from governance.web.nav import request_roles
from governance.web.presenters import governance as sel

PAGE_SIZE = 50


def _times(exc: PriorityException) -> PriorityException:
    """Relative times for the templates ("in 3 days", "2 hours ago")."""
    exc.created_rel = sel.relative(exc.created_at)  # type: ignore[attr-defined]
    exc.expires_rel = sel.relative(exc.expires_at)  # type: ignore[attr-defined]
    exc.wanted_rel = sel.relative(exc.wanted_by)  # type: ignore[attr-defined]
    exc.decided_rel = sel.relative(exc.decided_at)  # type: ignore[attr-defined]
    return exc


def _can_withdraw(user: Any, exc: PriorityException) -> bool:
    return exc.state in (ExceptionState.PENDING, ExceptionState.APPROVED) and (
        exc.requester_id == user.pk or roles.is_admin(user)
    )


def _job_ended(exc: PriorityException) -> bool:
    """A job exception whose job is no longer pending or running: moot, not decidable."""
    return exc.job is not None and exc.job.state not in ACTIVE_STATES


def _can_decide(user: Any, exc: PriorityException) -> bool:
    return (
        exc.state == ExceptionState.PENDING
        and not _job_ended(exc)
        and roles.can_decide_exceptions(user)
        and exc.requester_id != user.pk
    )


# The page is a fragment (web/fragments.py) of what it reads: exceptions, their teams,
# jobs and shares, the agreements due for review (all written with an audit entry or a
# job event) and the broken promises (evaluated without one: the newest evaluation),
# all in ``state_cache.page_version``. Its relative times are words written in Python and its
# agreements fall overdue with time alone (BUCKET_SECONDS). Per user: "you filed this",
# and the requester withdraws their own. The htmx swap of the results is not cached.
BUCKET_SECONDS = 60


@login_required
def exception_list(request: HttpRequest) -> HttpResponse:
    """Everyone reads; reviewers and admins get the review queue on top; leads a button
    to file one. The results region is an htmx-swappable partial."""
    return fragments.page(
        request,
        "exceptions",
        "exceptions/list.html",
        lambda: _list_context(request, whole=htmx_target(request) != "exception-results"),
        version=state_cache.page_version(),
        viewer=fragments.Viewer.USER,
        bucket=BUCKET_SECONDS,
        swaps="exception-results",
    )


def _list_context(request: HttpRequest, *, whole: bool = False) -> dict[str, Any]:
    """The results (``whole``: and the reviewers' queue and agreements)."""
    teams = sel.teams_for_filter()
    filters = ExceptionFilterForm(request.GET or None, teams=teams)
    state = team_id = None
    if filters.is_valid():
        state = filters.cleaned_data["state"] or None
        team_id = filters.cleaned_data["team"]
    page = Paginator(sel.exceptions_listing(state=state, team_id=team_id), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    held = request_roles(request)  # primes the user's groups: the role checks ask no more
    deciding = roles.can_decide_exceptions(request.user)
    user_id = request.user.pk
    admin = held.admin
    for exc in page.object_list:
        _times(exc)
        may_withdraw = exc.state in (ExceptionState.PENDING, ExceptionState.APPROVED) and (
            exc.requester_id == user_id or admin
        )
        exc.may_withdraw = may_withdraw  # type: ignore[attr-defined]
    context: dict[str, Any] = {
        "filters": filters,
        "page": page,
        "query": _query_without_page(request),
        "deciding": deciding,
        "may_file": bool(held.lead_team_ids),
    }
    if whole and deciding:
        queue = list(sel.review_queue()[:PAGE_SIZE])
        for exc in queue:
            _times(exc)
            exc.own = exc.requester_id == user_id  # type: ignore[attr-defined]
        context["review_queue"] = queue
        # The reviewers' page also lists the agreements due for their review.
        context.update(agreement_pages.attention_context())
    return context


def _query_without_page(request: HttpRequest) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


@login_required
def exception_new(request: HttpRequest) -> HttpResponse:
    """File an exception: team leads only, for their own teams' active jobs and shares."""
    if not roles.lead_team_ids(request.user):
        return HttpResponseForbidden("Only team leads file exceptions.")
    jobs, shares = sel.lead_targets(request.user)
    # "File an exception for this job" on a job page links here with ?job=<id>.
    raw_job = request.GET.get("job", "")
    initial = {"job": int(raw_job)} if raw_job.isdecimal() and len(raw_job) < 12 else {}
    form = ExceptionFileForm(request.POST or None, jobs=jobs, shares=shares, initial=initial)
    status = 200
    if request.method == "POST":

        def file() -> PriorityException:
            data = form.cleaned_data
            return exception_services.exception_file(
                actor=request.user,
                team=form.team_id() or 0,
                job=data.get("job"),
                share=data.get("share"),
                priority=data.get("priority"),  # type: ignore[arg-type]  # None: refused
                justification=data.get("justification") or "",
                wanted_by=data.get("wanted_by"),
                expires_at=data.get("expires_at"),
            )

        if form.is_valid():
            try:
                exc = file()
            except ServiceError as error:
                apply_service_errors(form, error)
                status = error.status
            else:
                messages.success(request, f"Exception {exc.pk} filed; a reviewer will decide it.")
                return redirect("web:exception", exc.pk)
        else:
            check_with_service(form, file)
            status = 400
    return render(request, "exceptions/new.html", {"form": form}, status=status)


@login_required
def exception_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A fragment (web/fragments.py) of the exception, its job and its history (audit
    entries: ``state_cache.page_version``), with words of relative times computed in
    Python (BUCKET_SECONDS). Per user: the requester withdraws, never decides, their own."""
    if not PriorityException.objects.filter(pk=pk).exists():
        raise Http404("No such exception.")

    def context() -> dict[str, Any]:
        exc = sel.exception_detail(pk)
        if exc is None:  # deleted since: the page is not cached
            raise Http404("No such exception.")
        return _detail_context(request, exc, DecisionForm())

    return fragments.page(
        request,
        "exception",
        "exceptions/detail.html",
        context,
        version=state_cache.page_version(),
        args=[pk],
        viewer=fragments.Viewer.USER,
        bucket=BUCKET_SECONDS,
        around={"exc": {"pk": pk}},
    )


def _render_detail(
    request: HttpRequest, exc: PriorityException, form: DecisionForm, status: int = 200
) -> HttpResponse:
    """The page with a decision's problems: rendered for this request, not cached."""
    context = _detail_context(request, exc, form)
    return render(request, "exceptions/detail.html", context, status=status)


def _detail_context(
    request: HttpRequest, exc: PriorityException, form: DecisionForm
) -> dict[str, Any]:
    history = list(sel.exception_history(exc))
    for entry in history:
        entry.when = sel.relative(entry.created_at)  # type: ignore[attr-defined]
    return {
        "exc": _times(exc),
        "form": form,
        "history": history,
        "may_decide": _can_decide(request.user, exc),
        "job_ended": _job_ended(exc),
        "may_withdraw": _can_withdraw(request.user, exc),
        "own_request": exc.requester_id == request.user.pk,
    }


ACTIONS = {
    "approve": (exception_services.exception_approve, "approved"),
    "reject": (exception_services.exception_reject, "rejected"),
    "withdraw": (exception_services.exception_withdraw, "withdrawn"),
}


@login_required
@require_POST
def exception_decide(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Approve, reject or withdraw with a note. On error the detail page comes back with
    the message and the service's status; nothing changed."""
    if action not in ACTIONS:
        raise Http404("Unknown action.")
    service, done = ACTIONS[action]
    form = DecisionForm(request.POST)
    form.is_valid()
    try:
        service(actor=request.user, exception=pk, note=form.cleaned_data.get("note", ""))
    except ServiceError as error:
        if error.status == 404:
            raise Http404("No such exception.") from error
        exc = sel.exception_detail(pk)
        assert exc is not None
        apply_service_errors(form, error)
        return _render_detail(request, exc, form, status=error.status)
    messages.success(request, f"Exception {pk} {done}.")
    target = request.POST.get("next")
    if target == "list":
        return redirect("web:exceptions")
    return redirect("web:exception", pk)
