"""What-if pages: a form like the share editor (every share's fields and the queue's
capacity, pre-filled with today's values) for one queue and window; the run's page with
its progress (live while it runs) and, when done, both sides' signals side by side with
the per-share differences, and the form that attaches it to an agreement as evidence."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from governance.models import Agreement, JobQueue, Policy, Share, WhatIf, WhatIfState
from governance.selectors import capacity as capacity_selectors
from governance.selectors import scheduling
from governance.selectors.windows import parse_window
from governance.services import whatif as whatif_services
from governance.services.errors import ServiceError
from governance.services.shares import limits_map

COMPARED = [
    ("jobs_finished", "Jobs finished", lambda f: f["jobs_finished"]["total"], "n"),
    ("wait_p50", "Wait to start p50", lambda f: f["wait_to_start"]["all"]["p50"], "s"),
    ("wait_p90", "Wait to start p90", lambda f: f["wait_to_start"]["all"]["p90"], "s"),
    ("turnaround_p50", "Turnaround p50", lambda f: f["turnaround"]["all"]["p50"], "s"),
    ("preemptions", "Preemptions suffered", lambda f: f["preemptions_suffered"]["total"], "n"),
    ("goodput", "Goodput", lambda f: f["goodput"], "%"),
    ("cost", "Cost", lambda f: f["cost"]["total"]["total"], "$"),
    (
        "borrowed",
        "Borrowed instance-hours",
        lambda f: sum(v["borrowed"] for v in f["instance_seconds"].values()) / 3600,
        "h",
    ),
]


def _show(value: Any, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "%":
        return f"{100 * value:.1f} %"
    if kind == "$":
        return f"${value:,.2f}"
    if kind == "s":
        return f"{value:,.0f} s" if abs(value) < 7200 else f"{value / 3600:,.1f} h"
    if kind == "h":
        return f"{value:,.1f} h"
    return f"{value:,}"


def _queue_or_404(queue_id: int) -> JobQueue:
    queue = capacity_selectors.queue(queue_id)
    if queue is None:
        raise Http404("No such queue.")
    return queue


def _form_rows(queue: JobQueue, data: Any = None, baseline: str | None = None) -> dict[str, Any]:
    """The form's rows: every share as it is, or as the ``baseline`` sets it (shown only:
    the shares themselves are not changed)."""
    shares = list(Share.objects.filter(queue=queue).order_by("name"))
    for share in shares:
        for field, value in whatif_services.BASELINES.get(baseline or "", {}).items():
            setattr(share, field, value)
    types = list(queue.capacities.select_related("instance_type").order_by("instance_type__name"))
    rows = []
    for share in shares:
        limits = limits_map(share)
        rows.append(
            {
                "share": share,
                "limits": [(c.instance_type.name, limits.get(c.instance_type.name)) for c in types],
            }
        )
    return {
        "share_rows": rows,
        "types": [(c.instance_type.name, c.count) for c in types],
        "policies": Policy.choices,
        "data": data,
        "baseline": baseline if baseline in whatif_services.BASELINES else None,
        "baselines": list(whatif_services.BASELINE_LABELS.items()),
    }


def _proposal(queue: JobQueue, post: Any) -> dict[str, Any]:
    """Only what the form changed, in the API's terms (the service checks the values)."""
    shares: dict[str, dict[str, Any]] = {}
    for share in Share.objects.filter(queue=queue).order_by("name"):
        prefix = f"share-{share.pk}-"
        current = limits_map(share)
        fields: dict[str, Any] = {}
        policy = post.get(prefix + "policy")
        if policy and policy != share.policy:
            fields["policy"] = policy
        borrow = post.get(prefix + "borrow_limit", "").strip()
        now_borrow = "" if share.borrow_limit is None else str(share.borrow_limit)
        if borrow != now_borrow and borrow != "":
            fields["borrow_limit"] = int(borrow) if borrow.lstrip("-").isdigit() else borrow
        retries = post.get(prefix + "preemption_retries", "").strip()
        now_retries = "" if share.preemption_retries is None else str(share.preemption_retries)
        if retries != now_retries:
            fields["preemption_retries"] = (
                None if retries == "" else int(retries) if retries.isdigit() else retries
            )
        in_share = post.get(prefix + "in_share_preemption") == "on"
        if in_share != share.in_share_preemption:
            fields["in_share_preemption"] = in_share
        limits: dict[str, Any] = {}
        for capacity in queue.capacities.select_related("instance_type"):
            name = capacity.instance_type.name
            raw = post.get(f"{prefix}limit-{name}", "").strip()
            if raw != "":
                limits[name] = int(raw) if raw.isdigit() else raw
        if limits != current:
            fields["limits"] = limits
        if fields:
            shares[share.name] = fields
    capacity_changes: dict[str, Any] = {}
    for capacity in queue.capacities.select_related("instance_type"):
        raw = post.get(f"capacity-{capacity.instance_type.name}", "").strip()
        if raw != "" and raw != str(capacity.count):
            capacity_changes[capacity.instance_type.name] = int(raw) if raw.isdigit() else raw
    return {
        "baseline": post.get("baseline") or None,
        "shares": shares,
        "capacity": capacity_changes,
    }


@login_required
def whatif_new(request: HttpRequest, queue_id: int) -> HttpResponse:
    queue = _queue_or_404(queue_id)
    now = timezone.now()
    errors: dict[str, list[str]] = {}
    status = 400
    if request.method == "POST":
        try:
            window = parse_window(
                {"from": request.POST.get("from"), "to": request.POST.get("to")}, now=now
            )
            run = whatif_services.whatif_request(
                actor=request.user,
                queue=queue,
                start=window.start,
                stop=window.stop,
                proposal=_proposal(queue, request.POST),
            )
        except ServiceError as exc:
            errors, status = exc.errors, exc.status
        else:
            scheduling.whatif_start(run.pk)
            return redirect("web:whatif", run.pk)
    context = {
        "queue": queue,
        "errors": errors,
        "from_value": request.POST.get("from") or (now - timedelta(days=1)).isoformat(),
        "to_value": request.POST.get("to") or now.isoformat(),
        "may_request": whatif_services.may_request(request.user),
        "recent": WhatIf.objects.filter(queue=queue).order_by("-created_at", "-id")[:10],
        **_form_rows(
            queue,
            request.POST if request.method == "POST" else None,
            (request.POST if request.method == "POST" else request.GET).get("baseline"),
        ),
    }
    return render(request, "whatif/new.html", context, status=status if errors else 200)


def _comparison(result: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"(whole queue)": result["baseline"]["queue"]}
    base.update({g["share"]: g for g in result["baseline"]["groups"]})
    new = {"(whole queue)": result["proposed"]["queue"]}
    new.update({g["share"]: g for g in result["proposed"]["groups"]})
    recorded: dict[str, Any] = {}
    if result.get("recorded"):  # runs from before it was kept have none
        recorded = {"(whole queue)": result["recorded"]["queue"]}
        recorded.update({g["share"]: g for g in result["recorded"]["groups"]})
    out = []
    for name, before in base.items():
        after = new.get(name)
        if after is None:
            continue
        rows = []
        for _, label, pick, kind in COMPARED:
            a, b = pick(before), pick(after)
            change = None if a is None or b is None else b - a
            sign = "" if not change else ("+" if change > 0 else "-")
            shown = _show(abs(change), kind) if change else "no change"
            real = recorded.get(name)
            rows.append(
                {
                    "label": label,
                    "recorded": None if real is None else _show(pick(real), kind),
                    "before": _show(a, kind),
                    "after": _show(b, kind),
                    "change": f"{sign}{shown}" if change is not None else "—",
                }
            )
        out.append({"name": name, "rows": rows, "recorded": name in recorded})
    return out


# The figures a result's sentence per share speaks of, by their COMPARED key.
SPOKEN = ("wait_p90", "turnaround_p50", "preemptions", "goodput", "cost", "jobs_finished")
STATE_WORDS = {"kept": "kept", "broken": "broken", "no_data": "without data"}


def _promise_text(promise: dict[str, Any]) -> str:
    return f"“{promise['figure']} {promise['comparison']} {float(promise['threshold']):g}”"


def _sentences(result: dict[str, Any]) -> list[str]:
    """Per share (then per team with promises), in a sentence, what the proposal would
    change: the figures that move and the promises whose state would change."""
    before = {g["share"]: g for g in result["baseline"]["groups"]}
    after = {g["share"]: g for g in result["proposed"]["groups"]}
    promises = result.get("promises") or []
    out = []
    for name, old in before.items():
        new = after.get(name)
        if new is None:
            continue
        parts = []
        for key, label, pick, kind in COMPARED:
            if key not in SPOKEN:
                continue
            a, b = pick(old), pick(new)
            if a == b or (a is None and b is None):
                continue
            parts.append(f"{label.lower()} from {_show(a, kind)} to {_show(b, kind)}")
        parts += _promise_changes(
            p for p in promises if p["group_by"] == "share" and p["name"] == name
        )
        out.append(
            f"Share {name}: " + ("; ".join(parts) if parts else "nothing would change") + "."
        )
    teams = sorted({p["name"] for p in promises if p["group_by"] == "team"})
    for team in teams:
        changes = _promise_changes(
            p for p in promises if p["group_by"] == "team" and p["name"] == team
        )
        out.append(
            f"Team {team}: "
            + ("; ".join(changes) if changes else "its promises would hold as they did")
            + "."
        )
    return out


def _promise_changes(promises: Any) -> list[str]:
    words = []
    for p in promises:
        was, would = p["baseline"]["state"], p["proposed"]["state"]
        if was != would:
            words.append(
                f"promise {_promise_text(p)} would be {STATE_WORDS[would]} instead of "
                f"{STATE_WORDS[was]}"
            )
    return words


def _promise_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for p in result.get("promises") or []:
        rows.append(
            {
                **p,
                "text": _promise_text(p),
                "subject": f"{p['group_by']} {p['name']}",
                "changed": p["baseline"]["state"] != p["proposed"]["state"],
            }
        )
    return rows


def _run_context(request: HttpRequest, run: WhatIf) -> dict[str, Any]:
    context: dict[str, Any] = {
        "run": run,
        "live": run.state in (WhatIfState.QUEUED, WhatIfState.RUNNING),
    }
    if run.state == WhatIfState.DONE and run.result:
        context["comparison"] = _comparison(run.result)
        context["sentences"] = _sentences(run.result)
        context["promise_rows"] = _promise_rows(run.result)
        context["agreements"] = list(Agreement.objects.order_by("title").values_list("pk", "title"))
    return context


def _run_or_404(run_id: int) -> WhatIf:
    run = (
        WhatIf.objects.select_related("queue", "agreement", "requested_by")
        .filter(pk=run_id)
        .first()
    )
    if run is None:
        raise Http404("No such what-if.")
    return run


@login_required
def whatif_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    return render(request, "whatif/detail.html", _run_context(request, run))


@login_required
def whatif_status_partial(request: HttpRequest, run_id: int) -> HttpResponse:
    """Polled every second while the run is queued or running."""
    run = _run_or_404(run_id)
    return render(request, "whatif/detail.html#status", _run_context(request, run))


@login_required
def whatif_attach(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    if request.method != "POST":
        return redirect("web:whatif", run.pk)
    raw = request.POST.get("agreement", "")
    try:
        whatif_services.whatif_attach(
            actor=request.user,
            whatif=run,
            agreement=int(raw) if raw.isdigit() and len(raw) < 12 else 0,
        )
    except ServiceError as exc:
        for field, problems in exc.errors.items():
            messages.error(request, f"{field}: {' '.join(problems)}")
    else:
        messages.success(request, "Attached to the agreement as evidence.")
    return redirect("web:whatif", run.pk)
