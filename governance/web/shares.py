"""Share pages: one share's settings and usage, and the admins' editor with a live preview.

The editor posts to the share service (``share_update``) with the version it read; a
stale edit (Conflict) shows the other change next to the admin's own values. While the
admin edits, the form is posted to the preview endpoint, which asks the engine (through
``scheduler.readings``) what the change would do before anything is saved.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from governance import roles
from governance.models import JobState, Share
from governance.models.shares import Policy
from governance.selectors import certifications as cert_selectors
from governance.selectors import change_requests as cr_selectors
from governance.selectors import jobs as job_selectors
from governance.selectors import scheduling, state_cache
from governance.selectors import shares as share_selectors
from governance.selectors.windows import parse_window
from governance.services import shares as share_services
from governance.services.errors import Conflict, ServiceError
from governance.web import agreements as agreement_pages
from governance.web import charts, fragments, regions
from governance.web.errors import apply_service_errors, check_with_service
from governance.web.forms_shares import ShareEditForm
from governance.web.links import url_pattern
from governance.web.presenters import overview as web_overview
from governance.web.presenters.overview import RULE_WORDS

COMPARED_FIELDS = (
    ("limits", "Limits"),
    ("policy", "Policy"),
    ("borrow_limit", "Borrow limit"),
    ("in_share_preemption", "In-share preemption"),
    ("preemption_retries", "Preemption retries"),
    ("enabled", "Enabled"),
    ("borrow_requires_verified_recovery", "Borrowing requires verified recovery"),
    ("certified_only", "Certified configurations only"),
)


def _share_or_404(share_id: int) -> Share:
    share = share_selectors.shares().filter(pk=share_id).first()
    if share is None:
        raise Http404("No such share.")
    return share


def _share_under_fingerprint(share_id: int, fingerprint: str, queue_id: int) -> Share:
    """The share (its queue, team, limits and their types) as of ``fingerprint``, its
    queue's state: all of it is in the rows that fingerprint digests (the queue, its
    shares and their limits, every type and team), so it is cached under it, one cache
    read where the share's two queries and its models cost a page 1.7 ms of CPU. A share
    never moves to another queue (``share_update`` refuses it); one deleted is missing
    from its queue's next fingerprint (404). Kept under the release too, whose models
    unpickle it."""
    share = state_cache.cached(
        f"share-row:{fragments.code_version()}:{fingerprint}:{share_id}",
        lambda: share_selectors.shares().filter(pk=share_id, queue_id=queue_id).first(),
    )
    if share is None:
        raise Http404("No such share.")
    return share


def _queue_id_or_404(share_id: int) -> int:
    queue_id = share_selectors.queue_id_of(share_id)
    if queue_id is None:
        raise Http404("No such share.")
    return queue_id


def _require_admin(request: HttpRequest) -> None:
    if not roles.is_admin(request.user):
        raise DjangoPermissionDenied("Only admins may change shares.")


def _show(field: str, value: Any) -> str:
    """A share field's value in words, for the conflict and preview comparisons."""
    if field == "limits":
        return ", ".join(f"{n} \u00d7 {t}" for t, n in sorted((value or {}).items())) or "none"
    if field == "borrow_limit":
        return "—" if value is None else ("unlimited" if value == -1 else f"{value}%")
    if field == "preemption_retries":
        return "unlimited" if value is None else str(value)
    if field in (
        "in_share_preemption",
        "enabled",
        "borrow_requires_verified_recovery",
        "certified_only",
    ):
        return "on" if value else "off"
    if field == "policy":
        return str(Policy(value).label) if value in Policy.values else str(value)
    return str(value)


def _comparison(current: dict[str, Any], proposed: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for field, label in COMPARED_FIELDS:
        now = current.get(field)
        if field == "borrow_limit" and field not in proposed:
            mine = now if proposed.get("policy") == Policy.LEND_AND_BORROW else None
        else:
            mine = proposed.get(field, now)
        rows.append(
            {
                "label": label,
                "current": _show(field, now),
                "yours": _show(field, mine),
                "differs": _show(field, now) != _show(field, mine),
            }
        )
    return rows


SHARE_JOB_COLUMNS = (
    "id",
    "name",
    "state",
    "priority",
    "borrowed",
    "submitted_at",
    "instance_type__name",
    "plan__name",
)


# The share's running and pending jobs are among its queue's active jobs, so their table
# (and count) is a function of the queue's state fingerprint (state_cache; a job's queue
# is its share's): cached under it, with the relative times left as slots written at
# each serving (web_time.fill_slots). Saves the count, the job query and 50 rows.
JOBS_HTML_VERSION = 2  # 2: the plan a job runs on


def _jobs_html(share: Share, fingerprint: str) -> SafeString:
    def context() -> dict[str, Any]:
        active = job_selectors.jobs().filter(
            share=share, state__in=(JobState.RUNNING, JobState.PENDING)
        )
        # Only what a row shows (templates/shares/detail.html), links built without a
        # reverse per row (governance.web.links).
        jobs = list(
            active.select_related(None)
            .select_related("instance_type", "plan")
            .only(*SHARE_JOB_COLUMNS)
            .order_by("state", "-priority", "submitted_at", "id")[:50]
        )
        job_url = url_pattern("web:job")
        for job in jobs:
            job.page_url = job_url.format(job.pk)  # type: ignore[attr-defined]
        return {"share": share, "jobs": jobs, "jobs_total": active.count()}

    return regions.template_region(
        f"share-jobs:{JOBS_HTML_VERSION}:{fingerprint}:{share.pk}",
        "shares/detail.html#jobs",
        context,
    )


# The page is a fragment (web/fragments.py) of what it reads: the queue's usage figures,
# plans and running and pending jobs (its state fingerprint: heartbeats rewrite running
# jobs without an event), the share's limits, history, agreements and change requests
# (audited) and the broken promises of its agreements (evaluated without an audit entry:
# the newest evaluation), both in ``state_cache.page_version``. The plans ended in the
# last 30 days move with time alone (BUCKET_SECONDS). The usage history is a hole
# written at each serving (the cycle adds to its rollups in place). Per rights: admins
# edit, leads of its team request changes.
BUCKET_SECONDS = 60


@login_required
def share_detail(request: HttpRequest, share_id: int) -> HttpResponse:
    queue_id = _queue_id_or_404(share_id)
    fingerprint = state_cache.queue_state_fingerprint(queue_id)
    share = _share_under_fingerprint(share_id, fingerprint, queue_id)
    version = "|".join(
        (
            fingerprint,
            state_cache.page_version(),
        )
    )
    body = fragments.fragment(
        request,
        "share",
        template="shares/detail.html#body",
        context=lambda: _detail_context(request, share, fingerprint),
        version=version,
        args=[share.pk],
        bucket=BUCKET_SECONDS,
        holes={
            "history": lambda: charts.history_html(
                request,
                queue_id=share.queue_id,
                share_ids=[share.pk],
                subject=f"Share {share.name}",
            )
        },
    )
    return render(request, "shares/detail.html", {"share": share, "body": body})


def _detail_context(request: HttpRequest, share: Share, fingerprint: str) -> dict[str, Any]:
    # The queue's usage figures, cached under its state (state_cache): shared by every
    # share page of the queue, recomputed on the first read after any change.
    block = state_cache.cached(
        f"usage-block:{fingerprint}",
        lambda: web_overview.usage_blocks([share.queue])[0],
    )
    bars = [
        {"instance_type": t.instance_type, "capacity": t.capacity, "bar": bar}
        for t in block.types
        for bar in t.shares
        if bar.share_id == share.pk
    ]
    changes = share_selectors.share_changes(share)
    history = [
        {
            "entry": entry,
            "rows": [r for r in _comparison(entry.before or {}, entry.after or {}) if r["differs"]]
            if entry.before
            else [],
        }
        for entry in changes
    ]
    return {
        "share": share,
        "limits": share_selectors.limits_of(share),
        "bars": bars,
        "jobs_html": _jobs_html(share, fingerprint),
        "history": history,
        "agreements": list(share.agreements.order_by("title")),
        **agreement_pages.attention_context(share_id=share.pk, overdue=False),
        "can_edit": roles.is_admin(request.user),
        "may_request": roles.is_lead_of(request.user, share.team_id),
        "change_requests": list(cr_selectors.change_requests().filter(share=share)[:20]),
        # Its capacity plans beside its limits: not ended, or ended in the last 30 days.
        "plans": [bar for bar in block.plans if bar.share_id == share.pk],
        "history_html": fragments.hole("history"),
    }


# The edit form as first shown is a fragment (web/fragments.py) of what it reads: the
# share, its limits, its team, its queue and the queue's instance types (all in the
# queue's state fingerprint, under which the share is kept too) and what is audited
# (``state_cache.page_version``). Admins only, alike. A form answered with its problems,
# a conflict or a preview is rendered for its request, from the share read afresh.
@login_required
def share_edit(request: HttpRequest, share_id: int) -> HttpResponse:
    _require_admin(request)
    if request.method != "POST":
        queue_id = _queue_id_or_404(share_id)
        fingerprint = state_cache.queue_state_fingerprint(queue_id)
        share = _share_under_fingerprint(share_id, fingerprint, queue_id)
        return fragments.page(
            request,
            "share-edit",
            "shares/edit.html",
            lambda: _edit_context(share),
            version=f"{fingerprint}|{state_cache.page_version()}",
            args=[share_id],
            viewer=fragments.Viewer.ROLES,
            around={"share": share},
        )
    share = _share_or_404(share_id)  # read afresh for a write
    type_names = share_selectors.queue_type_names(share.queue_id)
    context: dict[str, Any] = {"share": share}
    status = 200
    if "preview" in request.POST:
        # The preview as a plain form submit (without JavaScript): nothing is saved.
        form = ShareEditForm(request.POST, type_names=type_names, require_reason=False)
        context.update(_preview_context(request, share, form))
    else:
        form = ShareEditForm(request.POST, type_names=type_names)
        if form.is_valid():
            changes = form.changes()
            try:
                saved = share_services.share_update(
                    actor=request.user,
                    share=share.pk,
                    version=form.cleaned_data["version"],
                    changes=changes,
                    reason=form.cleaned_data["reason"].strip(),
                )
            except Conflict as exc:
                current = exc.current if isinstance(exc.current, dict) else {}
                data = request.POST.copy()
                data["version"] = str(current.get("version", share.version))
                form = ShareEditForm(data, type_names=type_names)
                form.is_valid()
                context["conflict"] = {
                    "rows": _comparison(current, changes),
                    "change": share_selectors.last_change(share),
                    "current_version": current.get("version"),
                }
                status = 409
            except ServiceError as exc:
                apply_service_errors(form, exc)
                status = exc.status
            else:
                if saved.version == form.cleaned_data["version"]:
                    # The service stores nothing when no value differs (no new version,
                    # no audit entry): say so rather than "saved".
                    messages.info(
                        request,
                        f"Nothing to save: share {share.name} already has these values "
                        f"(version {saved.version} unchanged, nothing added to the audit "
                        "trail).",
                    )
                else:
                    messages.success(
                        request, f"Share {share.name} saved as version {saved.version}."
                    )
                return redirect("web:share", share_id=share.pk)
        else:
            status = 400
            # Every problem at once: the service's rules on what did parse (a borrow
            # limit beyond its range, a limit above the largest count), in a dry run.
            check_with_service(
                form,
                lambda: share_services.share_update(
                    actor=request.user,
                    share=share.pk,
                    version=share.version,
                    changes=form.parsed_changes(),
                    reason="",
                ),
            )
    context["form"] = form
    context["borrow_enabled"] = (form["policy"].value() or share.policy) == Policy.LEND_AND_BORROW
    return render(request, "shares/edit.html", context, status=status)


def _edit_context(share: Share) -> dict[str, Any]:
    """The form filled with the share's stored values."""
    form = ShareEditForm(
        initial=ShareEditForm.initial_for(share, share_selectors.limits_of(share)),
        type_names=share_selectors.queue_type_names(share.queue_id),
    )
    borrow_enabled = (form["policy"].value() or share.policy) == Policy.LEND_AND_BORROW
    return {"share": share, "form": form, "borrow_enabled": borrow_enabled}


@login_required
@require_POST
def share_preview(request: HttpRequest, share_id: int) -> HttpResponse:
    """What the proposed (unsaved) values would do; field errors instead when invalid.

    Always 200 so htmx swaps the result in: nothing is written here.
    """
    _require_admin(request)
    share = _share_or_404(share_id)
    form = ShareEditForm(
        request.POST,
        type_names=share_selectors.queue_type_names(share.queue_id),
        require_reason=False,
    )
    context: dict[str, Any] = {
        "share": share,
        "form": form,
        **_preview_context(request, share, form),
    }
    return render(request, "shares/edit.html#preview", context)


def _preview_context(request: HttpRequest, share: Share, form: ShareEditForm) -> dict[str, Any]:
    """The preview's figures for a bound form (its errors instead, when invalid): the
    differences, what the next cycle would do, and the warnings (over-allocation, pending
    jobs that could never start). Nothing is written."""
    context: dict[str, Any] = {}
    if form.is_valid():
        proposed = form.changes()
        current = share_services.share_snapshot(share)
        context["diff"] = [r for r in _comparison(current, proposed) if r["differs"]]
        try:
            preview = scheduling.preview_share_change(
                actor=request.user, share=share, proposed=proposed
            )
            for rows in preview.values():
                for row in rows:
                    row["rule_words"] = RULE_WORDS.get(row.get("rule", ""), row.get("rule", ""))
            context["preview"] = preview
            context["warnings"] = scheduling.share_change_warnings(share, proposed)
            if proposed.get("certified_only") and not share.certified_only:
                context["uncertified"] = cert_selectors.uncertified_active(share.pk)
        except ServiceError as exc:
            apply_service_errors(form, exc)
    return context


LEDGER_WINDOWS = (("1h", "last hour", 1), ("1d", "last day", 24), ("7d", "last week", 168))


# The page is a fragment (web/fragments.py) of what it reads: the share and the names
# it shows (audited: the newest audit entry is in the queue's record version), its
# "now" (cached under the queue's state fingerprint and read at ``ledger.now.at``), the
# window's answer (kept under the record version, as of ``live.as_of``) and the window
# asked for (the query string). Times are slots. A bad window is rendered, not cached.
@login_required
def share_ledger(request: HttpRequest, share_id: int) -> HttpResponse:
    """The share's lending ledger (docs/ledger.md): who holds its idle entitlement and
    whose it holds, now and over a window, and what its pending jobs would reclaim now.
    ``?window=1h|1d|7d`` or ``?from=&to=`` (ISO 8601); a bad window is shown beside the
    fields and the last day is shown instead."""
    queue_id = _queue_id_or_404(share_id)
    now = timezone.now()
    chosen = request.GET.get("window", "1d")
    hours = {key: h for key, _, h in LEDGER_WINDOWS}.get(chosen, 24)
    errors: dict[str, list[str]] = {}
    span: timedelta | None = timedelta(hours=hours)
    start, stop = now - timedelta(hours=hours), now
    if request.GET.get("from") or request.GET.get("to"):
        chosen = ""
        try:
            window = parse_window(request.GET, now=now)
            start, stop, span = window.start, window.stop, None
        except ServiceError as exc:
            errors = exc.errors
    # The window: kept, as of its time, when it ends now (docs/ledger.md#on-the-page);
    # now: read live. The versions they are kept under are read in one query.
    fingerprint, version = state_cache.queue_fingerprint_and_record_version(queue_id)
    share = _share_under_fingerprint(share_id, fingerprint, queue_id)
    live = scheduling.share_ledger_as_of(share, start, stop, span=span, version=version)
    if live.answer is not None:
        start = datetime.fromisoformat(live.answer["window"]["from"])
        stop = datetime.fromisoformat(live.answer["window"]["to"])
    ledger = scheduling.with_now(
        live.answer or {}, scheduling.lending_now(share, fingerprint=fingerprint)
    )
    context = {
        "share": share,
        "ledger": ledger,
        "computing": live.answer is None,
        "as_of": live.as_of,
        "start": start,
        "stop": stop,
        "windows": LEDGER_WINDOWS,
        "chosen": chosen,
        "errors": errors,
        "raw_from": request.GET.get("from", "")[:64],
        "raw_to": request.GET.get("to", "")[:64],
        "poll_query": request.GET.urlencode(),
    }
    if errors:
        return render(request, "shares/ledger.html", context, status=400)
    # what the body shows beyond the share and the query string: the window's answer as
    # of its time (or that it is being computed), its bounds, and "now" as read at its time
    shown = (fingerprint, version, live.as_of, live.answer is None, start, stop)
    return fragments.page(
        request,
        "share-ledger",
        "shares/ledger.html",
        lambda: context,
        version="|".join(map(str, (*shown, ledger["now"].get("at")))),
        args=[share.pk, sorted(request.GET.lists())],
        viewer=fragments.Viewer.EVERYONE,
        around={"share": share},
    )
