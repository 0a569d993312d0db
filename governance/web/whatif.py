"""What-if pages: a form like the share editor (every share's fields and the queue's
capacity, pre-filled with today's values) for one queue and window; the run's page with
its progress (live while it runs) and, when done, both sides' signals side by side with
the per-share differences, and the form that attaches it to an agreement as evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
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
from governance.templatetags import figures

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
    """A compared figure in the product's one way of writing it (templatetags.figures)."""
    if kind == "%":
        return figures.percent(value)
    if kind == "$":
        return figures.money(value)
    if kind == "s":
        return figures.duration(value)
    if kind == "h":
        return figures.inst_hours(value)
    return figures.count(value)


def _queue_or_404(queue_id: int) -> JobQueue:
    queue = capacity_selectors.queue(queue_id)
    if queue is None:
        raise Http404("No such queue.")
    return queue


def _form_rows(
    queue: JobQueue,
    data: Any = None,
    errors: dict[str, list[str]] | None = None,
    baseline: str | None = None,
) -> dict[str, Any]:
    """The form's fields: today's values, or as the ``baseline`` sets them (shown only: the
    shares themselves are not changed), or what was sent (``data``) when it comes back
    with ``errors``, each message beside the field it is about (service keys
    ``shares.NAME.FIELD`` and ``capacity.TYPE``), the rest in ``general_errors``."""
    errors = dict(errors or {})
    shares = list(Share.objects.filter(queue=queue).select_related("team").order_by("name"))
    for share in shares:
        for field, value in whatif_services.BASELINES.get(baseline or "", {}).items():
            setattr(share, field, value)
    types = list(queue.capacities.select_related("instance_type").order_by("instance_type__name"))

    def sent(name: str, default: Any) -> Any:
        return data.get(name, default) if data is not None else default

    rows = []
    for share in shares:
        prefix = f"share-{share.pk}-"
        limits = limits_map(share)
        field_errors: dict[str, list[str]] = {}
        for key in [k for k in errors if k.startswith(f"shares.{share.name}.")]:
            field = key.removeprefix(f"shares.{share.name}.")
            target = (
                field if field in ("policy", "borrow_limit", "preemption_retries") else "limits"
            )
            field_errors.setdefault(target, []).extend(errors.pop(key))
        rows.append(
            {
                "share": share,
                "policy": sent(prefix + "policy", share.policy),
                "borrow_limit": sent(prefix + "borrow_limit", share.borrow_limit),
                "preemption_retries": sent(prefix + "preemption_retries", share.preemption_retries),
                "in_share_preemption": (
                    data.get(prefix + "in_share_preemption") == "on"
                    if data is not None
                    else share.in_share_preemption
                ),
                "borrow_requires_verified_recovery": (
                    data.get(prefix + "borrow_requires_verified_recovery") == "on"
                    if data is not None
                    else share.borrow_requires_verified_recovery
                ),
                "limits": [
                    {
                        "name": c.instance_type.name,
                        "value": sent(
                            f"{prefix}limit-{c.instance_type.name}",
                            limits.get(c.instance_type.name),
                        ),
                    }
                    for c in types
                ],
                "errors": errors.pop(f"shares.{share.name}", []),
                "field_errors": field_errors,
            }
        )
    type_rows = [
        {
            "name": c.instance_type.name,
            "count": sent(f"capacity-{c.instance_type.name}", c.count),
            "errors": errors.pop(f"capacity.{c.instance_type.name}", []),
        }
        for c in types
    ]
    field_errors = {name: errors.pop(name) for name in ("from", "to") if name in errors}
    return {
        "share_rows": rows,
        "types": type_rows,
        "policies": Policy.choices,
        "baseline": baseline if baseline in whatif_services.BASELINES else None,
        "baselines": list(whatif_services.BASELINE_LABELS.items()),
        "field_errors": field_errors,
        "general_errors": [
            message if key in ("proposal", "detail", "non_field_errors") else f"{key}: {message}"
            for key, messages in errors.items()
            for message in messages
        ],
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
            fields["borrow_limit"] = int(borrow) if borrow.lstrip("-").isdecimal() else borrow
        retries = post.get(prefix + "preemption_retries", "").strip()
        now_retries = "" if share.preemption_retries is None else str(share.preemption_retries)
        if retries != now_retries:
            fields["preemption_retries"] = (
                None if retries == "" else int(retries) if retries.isdecimal() else retries
            )
        in_share = post.get(prefix + "in_share_preemption") == "on"
        if in_share != share.in_share_preemption:
            fields["in_share_preemption"] = in_share
        verified_only = post.get(prefix + "borrow_requires_verified_recovery") == "on"
        if verified_only != share.borrow_requires_verified_recovery:
            fields["borrow_requires_verified_recovery"] = verified_only
        limits: dict[str, Any] = {}
        for capacity in queue.capacities.select_related("instance_type"):
            name = capacity.instance_type.name
            raw = post.get(f"{prefix}limit-{name}", "").strip()
            if raw != "":
                limits[name] = int(raw) if raw.isdecimal() else raw
        if limits != current:
            fields["limits"] = limits
        if fields:
            shares[share.name] = fields
    capacity_changes: dict[str, Any] = {}
    for capacity in queue.capacities.select_related("instance_type"):
        raw = post.get(f"capacity-{capacity.instance_type.name}", "").strip()
        if raw != "" and raw != str(capacity.count):
            capacity_changes[capacity.instance_type.name] = int(raw) if raw.isdecimal() else raw
    return {
        "baseline": post.get("baseline") or None,
        "shares": shares,
        "capacity": capacity_changes,
    }


def _minute(moment: datetime) -> str:
    """A time as the form shows it: to the minute, in UTC ("2026-12-01 09:00")."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


@login_required
def whatif_new(request: HttpRequest, queue_id: int) -> HttpResponse:
    queue = _queue_or_404(queue_id)
    now = timezone.now()
    errors: dict[str, list[str]] = {}
    status = 400
    if request.method == "POST":
        proposal = _proposal(queue, request.POST)
        window = None
        try:
            window = parse_window(
                {"from": request.POST.get("from"), "to": request.POST.get("to")}, now=now
            )
        except ServiceError as exc:
            errors.update(exc.errors)
            status = exc.status
        try:
            if window is None:
                # Every problem at once: the proposal is checked even when the window
                # is wrong (by the same rules whatif_request applies).
                whatif_services.clean_proposal(queue, proposal)
            else:
                run = whatif_services.whatif_request(
                    actor=request.user,
                    queue=queue,
                    start=window.start,
                    stop=window.stop,
                    proposal=proposal,
                )
        except ServiceError as exc:
            errors.update(exc.errors)
            status = max(status, exc.status)
        if not errors:
            return redirect("web:whatif", run.pk)
    context = {
        "queue": queue,
        "from_value": request.POST.get("from") or _minute(now - timedelta(days=1)),
        "to_value": request.POST.get("to") or _minute(now),
        "may_request": whatif_services.may_request(request.user),
        "recent": WhatIf.objects.filter(queue=queue).order_by("-created_at", "-id")[:10],
        **_form_rows(
            queue,
            request.POST if request.method == "POST" else None,
            errors,
            (request.POST if request.method == "POST" else request.GET).get("baseline"),
        ),
    }
    return render(request, "whatif/new.html", context, status=status if errors else 200)


# What each compared figure means when it goes up, for the sentence per share: (word for
# more, word for less), or None to say the figures only.
_DIRECTION = {
    "jobs_finished": ("more jobs finished", "fewer jobs finished"),
    "wait_p50": ("longer median wait to start", "shorter median wait to start"),
    "wait_p90": ("longer slow (p90) wait to start", "shorter slow (p90) wait to start"),
    "turnaround_p50": ("longer median turnaround", "shorter median turnaround"),
    "preemptions": ("more preemptions suffered", "fewer preemptions suffered"),
    "goodput": ("higher goodput", "lower goodput"),
    "cost": ("higher cost", "lower cost"),
    "borrowed": ("more borrowed instance-hours", "fewer borrowed instance-hours"),
}


def _sentence(name: str, changes: list[tuple[str, str, str, bool]], promised: list[str]) -> str:
    """One sentence of what changes for a share (or the whole queue): "background:
    shorter median wait to start (39 min → 12 min), more jobs finished (3 → 5)."""
    who = "The whole queue" if name == "(whole queue)" else f"Share {name}"
    parts = [
        f"{_DIRECTION[key][0 if up else 1]} ({before} → {after})"
        for key, before, after, up in changes
    ] + promised
    if not parts:
        return f"{who}: nothing changes."
    return f"{who}: {', '.join(parts)}."


def _comparison(result: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"(whole queue)": result["baseline"]["queue"]}
    base.update({g["share"]: g for g in result["baseline"]["groups"]})
    new = {"(whole queue)": result["proposed"]["queue"]}
    new.update({g["share"]: g for g in result["proposed"]["groups"]})
    recorded: dict[str, Any] = {}
    if result.get("recorded"):  # runs from before it was kept have none
        recorded = {"(whole queue)": result["recorded"]["queue"]}
        recorded.update({g["share"]: g for g in result["recorded"]["groups"]})
    promises = result.get("promises") or []
    out = []
    for name, before in base.items():
        after = new.get(name)
        if after is None:
            continue
        rows = []
        changes: list[tuple[str, str, str, bool]] = []
        for key, label, pick, kind in COMPARED:
            a, b = pick(before), pick(after)
            change = None if a is None or b is None else b - a
            sign = "" if not change else ("+" if change > 0 else "-")
            shown = _show(abs(change), kind) if change else "same"
            was, now = _show(a, kind), _show(b, kind)
            if change and was != now:
                changes.append((key, was, now, change > 0))
            real = recorded.get(name)
            rows.append(
                {
                    "label": label,
                    "recorded": None if real is None else _show(pick(real), kind),
                    "before": was,
                    "after": now,
                    "change": f"{sign}{shown}" if change is not None else "—",
                }
            )
        title = "Whole queue" if name == "(whole queue)" else f"Share {name}"
        kept = _promise_changes(
            p for p in promises if p["group_by"] == "share" and p["name"] == name
        )
        out.append(
            {
                "name": title,
                "rows": rows,
                "recorded": name in recorded,
                "sentence": _sentence(name, changes, kept),
            }
        )
    return out


_FIELD_WORDS = {
    "policy": "policy",
    "borrow_limit": "borrow limit",
    "limits": "limits",
    "in_share_preemption": "in-share preemption",
    "preemption_retries": "preemption retries",
    "borrow_requires_verified_recovery": "borrowing requires verified recovery",
}


def _proposal_words(proposal: dict[str, Any]) -> list[tuple[str, str]]:
    """Each share's proposed changes in words: "borrow limit 0 %, policy Lend"."""
    policies = dict(Policy.choices)
    out = []
    for name, fields in (proposal.get("shares") or {}).items():
        words = []
        for key, value in fields.items():
            if key == "policy":
                value = policies.get(value, value)
            elif key == "borrow_limit":
                value = "unlimited" if value == -1 else f"{value} %"
            elif key == "limits" and isinstance(value, dict):
                value = ", ".join(f"{n} {c}" for n, c in value.items()) or "none"
            elif key in ("in_share_preemption", "borrow_requires_verified_recovery"):
                value = "on" if value else "off"
            elif key == "preemption_retries" and value is None:
                value = "unlimited"
            words.append(f"{_FIELD_WORDS.get(key, key)} {value}")
        out.append((name, ", ".join(words)))
    return out


STATE_WORDS = {"kept": "kept", "broken": "broken", "no_data": "without data"}


def _written(promise: dict[str, Any], value: Any) -> str:
    """A value of the promise's figure as the pages write what it counts."""
    return figures.figure(value, scheduling.promise_unit(promise["figure"]))


def _promise_text(promise: dict[str, Any]) -> str:
    threshold = _written(promise, float(promise["threshold"]))
    return f"“{promise['figure']} {promise['comparison']} {threshold}”"


def _team_sentences(result: dict[str, Any]) -> list[str]:
    """Per team with promises, in a sentence, which of its promises would change state
    (a share's promises are in its own sentence, ``_comparison``)."""
    promises = result.get("promises") or []
    out = []
    for team in sorted({p["name"] for p in promises if p["group_by"] == "team"}):
        changes = _promise_changes(
            p for p in promises if p["group_by"] == "team" and p["name"] == team
        )
        out.append(
            f"Team {team}: "
            + (", ".join(changes) if changes else "its promises would hold as they did")
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
                "threshold_text": _written(p, float(p["threshold"])),
                "baseline_text": _written(p, p["baseline"]["value"]),
                "proposed_text": _written(p, p["proposed"]["value"]),
                "subject": f"{p['group_by']} {p['name']}",
                "changed": p["baseline"]["state"] != p["proposed"]["state"],
            }
        )
    return rows


def _run_context(request: HttpRequest, run: WhatIf) -> dict[str, Any]:
    context: dict[str, Any] = {
        "run": run,
        "live": run.state in (WhatIfState.QUEUED, WhatIfState.RUNNING),
        "proposal_words": _proposal_words(run.proposal or {}),
    }
    if run.state == WhatIfState.DONE and run.result:
        context["comparison"] = _comparison(run.result)
        context["sentences"] = [g["sentence"] for g in context["comparison"]]
        context["sentences"] += _team_sentences(run.result)
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
            agreement=int(raw) if raw.isdecimal() and len(raw) < 12 else 0,
        )
    except ServiceError as exc:
        for field, problems in exc.errors.items():
            messages.error(request, f"{field}: {' '.join(problems)}")
    else:
        messages.success(request, "Attached to the agreement as evidence.")
    return redirect("web:whatif", run.pk)
