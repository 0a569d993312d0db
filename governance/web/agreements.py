"""Allocation agreements: a searchable knowledge base (PostgreSQL full-text search via
``selectors.agreements``), each agreement with its versions, a readable diff between
consecutive versions, its shares' usage and reclaim counts; edit and create forms call
``services.agreements``."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.postgres.search import SearchHeadline, SearchQuery
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from governance import roles
from governance.models import (
    Agreement,
    AgreementVersion,
    PromiseState,
    Team,
    WhatIf,
)
from governance.selectors import agreements as agreement_selectors
from governance.selectors import state_cache
from governance.services import agreements as agreement_services
from governance.services import promises as promise_services
from governance.services.errors import ServiceError
from governance.web import fragments
from governance.web.charts import promise_chart
from governance.web.errors import apply_service_errors, check_with_service
from governance.web.forms_governance import (
    PROMISE_ERROR_FIELDS,
    AgreementForm,
    ReviewForm,
)
from governance.web.nav import request_roles
from governance.web.presenters import governance as sel

PAGE_SIZE = 50
# How long a cached page may show a review date or a window as of (web/fragments.py).
BUCKET_SECONDS = 60
TEXT_FIELDS = (
    ("title", "Title"),
    ("body", "Agreement"),
    ("reclaim_assumptions", "Reclaim the owner accepts"),
    ("recovery_assumptions", "Recovery assumptions"),
)


# The list is a fragment (web/fragments.py) of what it shows: agreements, their shares,
# queues and teams (audited) and their promises' states (evaluated without an audit
# entry: the newest evaluation), all in ``state_cache.page_version``; a review date passes with
# time alone (BUCKET_SECONDS). The htmx swap of the results is rendered, not cached.
@login_required
def agreement_list(request: HttpRequest) -> HttpResponse:
    """All agreements by title, or the ones matching ``?q=`` best first with a highlighted
    snippet (SearchHeadline, computed only for the page shown)."""
    return fragments.page(
        request,
        "agreements",
        "agreements/list.html",
        lambda: _list_context(request),
        version=state_cache.page_version(),
        bucket=BUCKET_SECONDS,
        swaps="agreement-results",
    )


def _list_context(request: HttpRequest) -> dict[str, Any]:
    q = request.GET.get("q", "").strip()
    base = agreement_selectors.agreements().prefetch_related("shares__queue", "shares__team")
    qs: Any
    if q:
        query = SearchQuery(q, search_type="websearch", config=agreement_selectors.SEARCH_CONFIG)
        qs = agreement_selectors.search_agreements(q, base).annotate(
            snippet=SearchHeadline(
                "body",
                query,
                config=agreement_selectors.SEARCH_CONFIG,
                start_sel="<mark>",
                stop_sel="</mark>",
                max_words=35,
                min_words=15,
            ),
            assumption_snippet=SearchHeadline(
                "reclaim_assumptions",
                query,
                config=agreement_selectors.SEARCH_CONFIG,
                start_sel="<mark>",
                stop_sel="</mark>",
                max_words=35,
                min_words=15,
            ),
        )
    else:
        qs = base.order_by("title", "id")
    page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    today = timezone.localdate()
    for agreement in page.object_list:
        # Marks (docs/agreements.md): promises broken at their last evaluation, and a
        # review date that has passed; from the promises already prefetched.
        agreement.broken_count = sum(
            1 for p in agreement.promises_in_force if p.state == PromiseState.BROKEN
        )
        agreement.overdue = agreement.review_by is not None and agreement.review_by < today
        # Snippets come from PostgreSQL with only <mark> added: escape the text, keep marks.
        for attr in ("snippet", "assumption_snippet"):
            raw = getattr(agreement, attr, None)
            if raw is not None:
                setattr(agreement, attr, _marked(raw))
    held = request_roles(request)
    return {"page": page, "q": q, "may_create": held.admin or bool(held.lead_team_ids)}


def _marked(text: str) -> SafeString:
    parts = re.split(r"(</?mark>)", text)
    return mark_safe("".join(p if p in ("<mark>", "</mark>") else escape(p) for p in parts))


def word_diff(old: str, new: str) -> SafeString:
    """Words removed struck through, words added highlighted (HTML-escaped)."""
    a, b = re.findall(r"\S+|\s+", old or ""), re.findall(r"\S+|\s+", new or "")
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(escape("".join(a[i1:i2])))
            continue
        if op in ("delete", "replace"):
            out.append(f"<del>{escape(''.join(a[i1:i2]))}</del>")
        if op in ("insert", "replace"):
            out.append(f"<ins>{escape(''.join(b[j1:j2]))}</ins>")
    return mark_safe("".join(out))


def version_changes(
    previous: AgreementVersion,
    current: AgreementVersion,
    share_names: dict[int, str],
    team_names: dict[int, str] | None = None,
) -> list[dict[str, Any]]:
    """What changed from one version to the next, field by field, readable."""
    rows: list[dict[str, Any]] = []
    for field, label in TEXT_FIELDS:
        old, new = getattr(previous, field), getattr(current, field)
        if old != new:
            rows.append({"label": label, "html": word_diff(old, new)})
    if previous.review_by != current.review_by:
        rows.append(
            {
                "label": "Review by",
                "html": mark_safe(
                    f"<del>{escape(previous.review_by or 'none')}</del> → "
                    f"<ins>{escape(current.review_by or 'none')}</ins>"
                ),
            }
        )
    if previous.owner_id != current.owner_id:
        rows.append(
            {
                "label": "Owner",
                "html": mark_safe(
                    f"<del>{escape(previous.owner.username)}</del> → "
                    f"<ins>{escape(current.owner.username)}</ins>"
                ),
            }
        )
    old_ids, new_ids = set(previous.share_ids or []), set(current.share_ids or [])
    if old_ids != new_ids:
        removed = [
            f"<del>{escape(share_names.get(i, f'share {i}'))}</del>"
            for i in sorted(old_ids - new_ids)
        ]
        added = [
            f"<ins>{escape(share_names.get(i, f'share {i}'))}</ins>"
            for i in sorted(new_ids - old_ids)
        ]
        rows.append({"label": "Shares", "html": mark_safe(" ".join(removed + added))})
    old_promises = [_promise_words(p, share_names, team_names) for p in previous.promises or []]
    new_promises = [_promise_words(p, share_names, team_names) for p in current.promises or []]
    if sorted(old_promises) != sorted(new_promises):
        parts = [f"<del>{escape(p)}</del>" for p in old_promises if p not in new_promises]
        parts += [f"<ins>{escape(p)}</ins>" for p in new_promises if p not in old_promises]
        rows.append({"label": "Promises", "html": mark_safe("<br>".join(parts))})
    return rows


def _promise_words(
    snapshot: dict[str, Any], share_names: dict[int, str], team_names: dict[int, str] | None
) -> str:
    """A promise of a version snapshot in words."""
    if snapshot.get("share") is not None:
        subject = share_names.get(snapshot["share"], f"share {snapshot['share']}")
    else:
        team = snapshot.get("team")
        subject = f"team {(team_names or {}).get(team, team) if isinstance(team, int) else team}"
    return (
        f"{snapshot.get('figure')} {snapshot.get('comparison')} {snapshot.get('threshold'):g} "
        f"for {subject} over {snapshot.get('window_days')} days"
    )


def _agreement(pk: int) -> Agreement:
    agreement = (
        agreement_selectors.agreements()
        .prefetch_related("shares__queue", "shares__team")
        .filter(pk=pk)
        .first()
    )
    if agreement is None:
        raise Http404("No such agreement.")
    return agreement


# The page is a fragment (web/fragments.py) of what it reads: the agreement, its
# versions, editors, shares' limits, running jobs and reclaims (each written with a job
# event or an audit entry), its promises' evaluations (the newest: all three in
# ``state_cache.page_version``) and its what-if evidence, which a what-if run writes
# without one (``rows_version`` of its rows). The 30-day reclaim window and the review
# date move with time alone (BUCKET_SECONDS). Per user: editors and reviewers by name.


@login_required
def agreement_detail(request: HttpRequest, pk: int) -> HttpResponse:
    # Its title for the page around the fragment; the rest is read on a miss.
    agreement = Agreement.objects.only("pk", "title").filter(pk=pk).first()
    if agreement is None:
        raise Http404("No such agreement.")
    version = "|".join(
        (
            state_cache.page_version(),
            state_cache.rows_version(WhatIf, "agreement", agreement.pk),
        )
    )
    body = fragments.fragment(
        request,
        "agreement",
        template="agreements/detail.html#body",
        context=lambda: _detail_context(request, _agreement(pk)),
        version=version,
        args=[agreement.pk],
        viewer=fragments.Viewer.USER,
        bucket=BUCKET_SECONDS,
    )
    return render(request, "agreements/detail.html", {"agreement": agreement, "body": body})


def _detail_context(
    request: HttpRequest, agreement: Agreement, review_form: ReviewForm | None = None
) -> dict[str, Any]:
    shares = list(agreement.shares.all())
    linked = sel.linked_share_usage([s.pk for s in shares])
    versions = list(agreement.versions.all())  # oldest first (prefetched)
    share_names = {s.pk: f"{s.queue.name}/{s.name}" for s in shares}
    missing = {i for v in versions for i in (v.share_ids or [])} - set(share_names)
    if missing:
        share_names.update(sel.share_names(missing))
    team_ids = {p.get("team") for v in versions for p in v.promises or []} - {None}
    team_names = dict(Team.objects.filter(pk__in=team_ids).values_list("pk", "name"))
    history = []
    for index, version in enumerate(versions):
        previous = versions[index - 1] if index else None
        history.append(
            {
                "version": version,
                "changes": version_changes(previous, version, share_names, team_names)
                if previous
                else None,
                "shares": [share_names.get(i, f"share {i}") for i in version.share_ids or []],
            }
        )
    history.reverse()
    return {
        "agreement": agreement,
        "linked": linked,
        "history": history,
        "editors": [e.username for e in agreement.editors.all()],
        "evidence": agreement_selectors.evidence(agreement.pk),
        "may_change": agreement_services.may_change(request.user, agreement),
        "window": sel.RECLAIM_WINDOW_DAYS,
        **promise_context(request, agreement, review_form),
    }


def promise_context(
    request: HttpRequest, agreement: Agreement, review_form: ReviewForm | None = None
) -> dict[str, Any]:
    """The agreement page's promises (each with its chart of past evaluations and the
    link to the jobs behind its last value) and its review form."""
    promises = list(getattr(agreement, "promises_in_force", []))
    history = agreement_selectors.promise_history([p.pk for p in promises])
    rows = [
        {
            "promise": p,
            "words": promise_services.describe(p),
            "threshold": promise_services.written(p, p.threshold),
            "value": promise_services.written(p, p.value),
            # the numbers as stored (and as the API gives them), for the tooltips
            "threshold_number": f"{p.threshold:.10g}",
            "value_number": "" if p.value is None else f"{p.value:.10g}",
            "link": agreement_selectors.promise_link(p),
            "chart": promise_chart(
                history[p.pk],
                threshold=p.threshold,
                title=promise_services.describe(p),
                written=functools.partial(promise_services.written, p),
            ),
            "evaluations": len(history[p.pk]),
        }
        for p in promises
    ]
    may_review = agreement_services.may_review(request.user, agreement)
    return {
        "promise_rows": rows,
        "broken_count": sum(1 for p in promises if p.state == "broken"),
        "may_review": may_review,
        "review_form": review_form or ReviewForm(initial={"version": agreement.version}),
        "overdue": agreement.review_by is not None and agreement.review_by < timezone.localdate(),
    }


@login_required
def agreement_evaluate(request: HttpRequest, pk: int) -> HttpResponse:
    """Evaluate the agreement's promises now (POST), then show the agreement."""
    if request.method != "POST":
        return redirect("web:agreement", pk)
    try:
        agreement_services.agreement_evaluate(actor=request.user, agreement=pk)
    except ServiceError as error:
        if error.status == 404:
            raise Http404("No such agreement.") from error
        return HttpResponseForbidden(" ".join(m for ms in error.errors.values() for m in ms))
    messages.success(request, "Promises evaluated over their windows ending now.")
    return redirect("web:agreement", pk)


@login_required
def agreement_review(request: HttpRequest, pk: int) -> HttpResponse:
    """Record a review (POST): a new version with its note and the next review date."""
    agreement = _agreement(pk)
    if request.method != "POST":
        return redirect("web:agreement", pk)
    form = ReviewForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            agreement_services.agreement_review(
                actor=request.user,
                agreement=agreement.pk,
                version=form.cleaned_data["version"],
                note=form.cleaned_data["note"],
                review_by=form.cleaned_data["review_by"],
            )
        except ServiceError as error:
            if error.status == 403:
                return HttpResponseForbidden(
                    " ".join(m for ms in error.errors.values() for m in ms)
                )
            apply_service_errors(form, error)
            status = error.status
        else:
            messages.success(request, "Review recorded as a new version.")
            return redirect("web:agreement", agreement.pk)
    context = _detail_context(request, _agreement(agreement.pk), form)
    return render(request, "agreements/detail.html", context, status=status)


def _promises(form: AgreementForm, agreement: Agreement | None) -> list[dict[str, Any]]:
    """The promises in force minus those withdrawn, plus the new one (last)."""
    withdrawn = set(form.cleaned_data.get("withdraw") or [])
    kept = [
        promise_services.promise_snapshot(p)
        for p in (getattr(agreement, "promises_in_force", []) if agreement else [])
        if p.pk not in withdrawn
    ]
    new = form.new_promise()
    return [*kept, new] if new is not None else kept


def _field_of(form: AgreementForm, new_index: int | None) -> Callable[[str], str | None]:
    """The form field a service error key is about: the new promise's keys
    (``promises[i].FIELD``) are its ``promise_`` fields, other keys are themselves. Its
    share or team checked against shares that did not parse says nothing (None)."""
    prefix = f"promises[{new_index}]."

    def field_of(key: str) -> str | None:
        if new_index is None or not key.startswith(prefix):
            return key
        field = PROMISE_ERROR_FIELDS.get(key[len(prefix) :], key)
        if field == "promise_subject" and "shares" in form.errors:
            return None
        return field

    return field_of


def _apply_errors(form: AgreementForm, error: ServiceError, new_index: int | None) -> None:
    """Service errors beside their fields; the new promise's beside the promise fields."""
    field_of = _field_of(form, new_index)
    for key, problems in list(error.errors.items()):
        field = field_of(key)
        if field is not None and field != key:
            for problem in problems:
                form.add_error(field, problem)
            del error.errors[key]
    apply_service_errors(form, error)


def _service_values(
    form: AgreementForm, *, people: bool, agreement: Agreement | None = None
) -> dict[str, Any]:
    """The service's arguments. A field that did not parse is None (or empty), so
    ``check_with_service`` can still ask the service about the others."""
    data = form.cleaned_data
    values: dict[str, Any] = {
        "title": data.get("title"),
        "body": data.get("body") or "",
        "reclaim_assumptions": data.get("reclaim_assumptions") or "",
        "recovery_assumptions": data.get("recovery_assumptions") or "",
        "shares": list(data.get("shares") or []),
        "review_by": data.get("review_by"),
        "promises": _promises(form, agreement),
    }
    if people:
        if data.get("owner"):
            values["owner"] = data["owner"]
        values["editors"] = list(data.get("editors") or [])
    return values


@login_required
def agreement_new(request: HttpRequest) -> HttpResponse:
    if not (roles.is_admin(request.user) or roles.lead_team_ids(request.user)):
        return HttpResponseForbidden("Only admins and team leads create agreements.")
    shares = list(sel.share_choices_for(request.user))
    form = AgreementForm(
        request.POST or None,
        shares=shares,
        usernames=sel.usernames(),
        people_editable=True,
    )
    form.setup(figures=promise_services.figure_choices(), shares=shares, promises=[])
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                agreement = agreement_services.agreement_create(
                    actor=request.user,
                    reason=form.cleaned_data["reason"],
                    **_service_values(form, people=True),
                )
            except ServiceError as error:
                _apply_errors(form, error, 0)
                status = error.status
            else:
                messages.success(request, f"Agreement “{agreement.title}” recorded.")
                return redirect("web:agreement", agreement.pk)
        else:
            # Every problem at once: the service's rules (the promise's among them) on
            # what did parse, in a dry run.
            check_with_service(
                form,
                lambda: agreement_services.agreement_create(
                    actor=request.user,
                    reason=form.cleaned_data.get("reason") or "",
                    **_service_values(form, people=True),
                ),
                field_of=_field_of(form, 0),
            )
    return render(request, "agreements/form.html", {"form": form, "agreement": None}, status=status)


@login_required
def agreement_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Edit naming the version read; a stale version is a 409 with a clear message and
    the form keeps what the user typed."""
    agreement = _agreement(pk)
    if not agreement_services.may_change(request.user, agreement):
        return HttpResponseForbidden(
            "Only the owner, the editors and admins change this agreement."
        )
    people = roles.is_admin(request.user) or agreement.owner_id == request.user.pk
    linked = [s.pk for s in agreement.shares.all()]
    choices = list(sel.share_choices_for(request.user))
    known = {s.pk for s in choices}
    choices += [s for s in agreement.shares.all() if s.pk not in known]
    initial = {
        "title": agreement.title,
        "body": agreement.body,
        "reclaim_assumptions": agreement.reclaim_assumptions,
        "recovery_assumptions": agreement.recovery_assumptions,
        "shares": linked,
        "owner": agreement.owner.username,
        "editors": [e.username for e in agreement.editors.all()],
        "review_by": agreement.review_by,
        "version": agreement.version,
    }
    form = AgreementForm(
        request.POST or None,
        initial=initial,
        shares=choices,
        usernames=sel.usernames(),
        people_editable=people,
    )
    in_force = list(getattr(agreement, "promises_in_force", []))
    form.setup(
        figures=promise_services.figure_choices(),
        shares=list(agreement.shares.all()),
        promises=in_force,
    )
    status = 200
    conflict = False
    if request.method == "POST":
        status = 400
        valid = form.is_valid()
        values = _service_values(form, people=people, agreement=agreement)
        new_index = len(values["promises"]) - 1 if form.new_promise() else None
        if not valid:
            check_with_service(
                form,
                lambda: agreement_services.agreement_update(
                    actor=request.user,
                    agreement=agreement.pk,
                    version=form.cleaned_data.get("version"),
                    reason=form.cleaned_data.get("reason") or "",
                    **values,
                ),
                field_of=_field_of(form, new_index),
            )
        else:
            try:
                agreement_services.agreement_update(
                    actor=request.user,
                    agreement=agreement.pk,
                    version=form.cleaned_data["version"],
                    reason=form.cleaned_data["reason"],
                    **values,
                )
            except ServiceError as error:
                conflict = error.status == 409
                _apply_errors(form, error, new_index)
                status = error.status
            else:
                messages.success(request, "Agreement saved.")
                return redirect("web:agreement", agreement.pk)
    context = {"form": form, "agreement": agreement, "conflict": conflict}
    return render(request, "agreements/form.html", context, status=status)


def attention_context(*, share_id: int | None = None, overdue: bool = True) -> dict[str, Any]:
    """What ``agreements/_attention.html`` shows: the broken promises (of one share's
    agreements, or all) and, with ``overdue``, the agreements past their review date."""
    return {
        "broken_promises": [
            {
                "promise": p,
                "words": promise_services.describe(p),
                "value": promise_services.written(p, p.value),
                "link": agreement_selectors.promise_link(p),
            }
            for p in agreement_selectors.broken_promises(share_id=share_id)
        ],
        "overdue_agreements": list(agreement_selectors.overdue_agreements()) if overdue else [],
    }
