"""The one door from governance to the scheduler: reads that need the engine.

Everything in governance that asks the scheduler something comes through here: why jobs
wait and when they may start (both cached, for pages and API alike), what a share change
would do (with its permission check), usage as the engine counts it, and the shared
accounting arithmetic. Changes go
the other way through ``services.hooks``, which the scheduler listens to; nothing else in
governance imports the scheduler (``tests/test_architecture.py`` holds this).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from governance import roles
from governance.models import (
    DecisionRule,
    Job,
    JobEvent,
    JobQueue,
    JobState,
    QueueCapacity,
    Share,
    ShareLimit,
)
from governance.roles import AnyUser
from governance.selectors import state_cache
from governance.services.errors import PermissionDenied, ValidationFailed
from governance.services.shares import validate_share_fields
from scheduler import (
    estimates,
    history,
    ledger,
    live_answers,
    promises,
    readings,
    signal_store,
    signals,
    simulate,
    whatif,
)
from scheduler.engine import accounting
from scheduler.engine.accounting import ShareOnType, TypeAccount, account_type

__all__ = [
    "ShareOnType",
    "TypeAccount",
    "account_type",
    "accounting",
    "change_request_preview",
    "chargeback",
    "chargeback_as_of",
    "engine_usage",
    "entitled_forecast_jobs",
    "explain_generation",
    "explain_generations",
    "explain_generations_with",
    "explain_job",
    "explain_jobs",
    "exposure_jobs",
    "forecast_jobs",
    "lending_now",
    "never_starting",
    "preview_share_change",
    "promise_figures",
    "promise_is_fraction",
    "promise_judge",
    "queue_history",
    "queue_signals",
    "queue_signals_as_of",
    "replay",
    "share_change_warnings",
    "share_ledger",
    "share_ledger_as_of",
    "signals_rows",
    "start_blockers",
    "whatif_replay",
    "with_now",
]


# Why jobs wait, cached. Asking the engine means loading the queue's every active job
# into it and playing the cycle due now: ~100 ms on a queue of a few thousand pending
# jobs, far too slow for a page polled by many people. The answer depends only on what
# ``scheduler.cycle.read.load`` reads (the queue's active jobs, shares, limits, capacity
# and types) and, on a simulated queue, on the next run that finishes by itself. So it
# is cached under a fingerprint of those rows (``state_cache.queue_state_fingerprint``), for
# as long as ``scheduler.readings.explain_queue`` says it holds, at most EXPLAIN_MAX_AGE. A page
# therefore never shows reasons for a state other than the stored one. Entries are per
# job, so a page reads only its own 50. When an answer expires, one client asks the
# engine again while the others serve the answer of the same state kept KEPT_FOR longer
# (or wait for the new one): 20 clients of the team page no longer ask at once.
EXPLAIN_MAX_AGE = 30.0


def explain_jobs(
    queue_id: int,
    job_ids: Iterable[int],
    fingerprint: str | None = None,
    generation: list[str] | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """Pending job id -> reasons per preference for ``job_ids`` of the queue (jobs the
    next cycle would start, or not pending, are absent). One query and one cache read
    when cached (see above); no query when the
    caller passes the queue's ``state_cache.queue_state_fingerprint`` it already read.
    ``generation``, when given, receives the cached answer's token (explain_generation)
    if the answer served is a cached one."""

    def compute() -> tuple[dict[int, Any], str, float | None]:
        reasons, valid_for = readings.explain_queue(queue_id)
        # Its note names this answer (explain_generation).
        return reasons, uuid.uuid4().hex, valid_for

    found, token, cached = _per_job_cached("explain", queue_id, list(job_ids), fingerprint, compute)
    if generation is not None and cached:
        generation.append(token)
    return found


def explain_generation(queue_id: int, fingerprint: str) -> str | None:
    """A token naming the reasons ``explain_jobs`` serves for the queue in the state
    ``fingerprint`` now (a new one each time the engine is asked again); None when none
    are cached. What is rendered from the reasons may be cached under it."""
    return explain_generations({queue_id: fingerprint})[queue_id]


def explain_generations(fingerprints: dict[int, str]) -> dict[int, str | None]:
    """``explain_generation`` of several queues (id -> fingerprint), in one cache read."""
    return explain_generations_with(fingerprints, [])[0]


def explain_generations_with(
    fingerprints: dict[int, str], keys: list[str]
) -> tuple[dict[int, str | None], dict[str, Any]]:
    """``explain_generations`` and the cache entries ``keys`` found, in one cache read: a
    page reads what it rendered from the reasons with the reasons' generations."""
    ends = ("ok", "kept")
    found = state_cache.cache_get_many(
        [*keys, *(f"explain:{fp}:{end}" for fp in fingerprints.values() for end in ends)]
    )
    out: dict[int, str | None] = {}
    for queue_id, fp in fingerprints.items():
        token = found.get(f"explain:{fp}:ok", found.get(f"explain:{fp}:kept"))
        out[queue_id] = token if isinstance(token, str) else None
    return out, {key: found[key] for key in keys if key in found}


def explain_job(job: Job) -> list[dict[str, Any]]:
    """Why one pending job waits (empty when it does not), each preference's reason with
    ``can_ever_start`` and, when it cannot, ``what_would_let_it`` (see ``start_blockers``)."""
    if job.state != JobState.PENDING:
        return []
    reasons = explain_jobs(job.queue_id, [job.pk]).get(job.pk, [])
    return with_blockers(reasons, never_starting([job]).get(job.pk))


def with_blockers(
    reasons: list[dict[str, Any]], blockers: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The engine's reasons, each told whether its preference could ever start as the
    share and queue are configured, and if not what would let it."""
    by_preference = {b["preference"]: b for b in blockers or []}
    out = []
    for reason in reasons:
        blocker = by_preference.get(reason.get("preference"))
        out.append(
            {
                **reason,
                "can_ever_start": blocker is None,
                "what_would_let_it": blocker["what_would_let_it"] if blocker else "",
            }
        )
    return out


# A job that can never start as configured (docs/scheduling.md#why-is-my-job-waiting gives the
# reason for now; this says whether waiting can ever help). Plain arithmetic on the stored limits
# and
# capacity (scheduler.engine.accounting.most_ever): no engine run, so it is cheap enough
# for every page that shows a pending job.


def start_blockers(
    preferences: list[dict[str, Any]],
    *,
    share_name: str,
    policy: str,
    limits: dict[str, int],
    borrow_limit: int | None,
    capacity: dict[str, int],
) -> list[dict[str, Any]] | None:
    """None when some preference could start under this configuration; else, for every
    preference, what it asks, the most it could get and what would let it start."""
    out = []
    for index, pref in enumerate(preferences):
        if pref.get("plan"):
            return None  # a capacity plan: its own reasons (plan_*) say why it waits
        type_name = str(pref.get("instance_type"))
        count = pref.get("count")
        if not isinstance(count, int):
            return None  # not a job the service accepted: no claim about it
        limit = limits.get(type_name)
        cap = capacity.get(type_name, 0)
        most = accounting.most_ever(policy, limit, borrow_limit, cap)
        if count <= most:
            return None
        out.append(
            {
                "preference": index,
                "instance_type": type_name,
                "count": count,
                "most": most,
                "what_would_let_it": _what_would_let_it(
                    type_name, count, share_name, policy, limit, borrow_limit, cap
                ),
            }
        )
    return out


def _what_would_let_it(
    type_name: str,
    count: int,
    share_name: str,
    policy: str,
    limit: int | None,
    borrow_limit: int | None,
    capacity: int,
) -> str:
    if count > capacity:
        return (
            f"The queue has {capacity} \u00d7 {type_name} in all: an admin would have to add "
            f"capacity, or the job needs another preference."
        )
    if limit is None:
        return (
            f"Share {share_name} has no limit for {type_name}: an admin would have to add one "
            f"(of at least {count}), or the job needs another preference."
        )
    percent = accounting.borrow_percent_needed(limit, count)
    borrow = (
        "an unlimited borrow limit (-1)"
        if percent is None
        else f"a borrow limit of at least {percent}%"
    )
    if policy != "LEND_AND_BORROW":
        return (
            f"Share {share_name} may hold {limit} \u00d7 {type_name} and cannot borrow: an admin "
            f"would have to raise its limit to {count}, or make it Lend and borrow with "
            f"{borrow}; or the job needs another preference."
        )
    cap_words = f"its limit {limit} plus a borrow limit of {borrow_limit or 0}%"
    return (
        f"Share {share_name} may hold at most "
        f"{accounting.most_ever(policy, limit, borrow_limit, capacity)} \u00d7 {type_name} "
        f"({cap_words}): an admin would have to raise the limit to {count} or set {borrow}; "
        f"or the job needs another preference."
    )


def never_starting(jobs: Iterable[Job]) -> dict[int, list[dict[str, Any]]]:
    """Pending job id -> ``start_blockers`` for the jobs of ``jobs`` that can never start
    as their share and queue are configured now (three queries)."""
    pending = [job for job in jobs if job.state == JobState.PENDING]
    if not pending:
        return {}
    share_ids = {job.share_id for job in pending}
    queue_ids = {job.queue_id for job in pending}
    shares = {
        row["pk"]: row
        for row in Share.objects.filter(pk__in=share_ids).values(
            "pk", "name", "policy", "borrow_limit"
        )
    }
    limits: dict[int, dict[str, int]] = {}
    for share_id, type_name, count in ShareLimit.objects.filter(share_id__in=share_ids).values_list(
        "share_id", "instance_type__name", "count"
    ):
        limits.setdefault(share_id, {})[type_name] = count
    capacity: dict[int, dict[str, int]] = {}
    for queue_id, type_name, count in QueueCapacity.objects.filter(
        queue_id__in=queue_ids
    ).values_list("queue_id", "instance_type__name", "count"):
        capacity.setdefault(queue_id, {})[type_name] = count
    out = {}
    for job in pending:
        share = shares.get(job.share_id)
        if share is None:
            continue
        blockers = start_blockers(
            list(job.preferences or []),
            share_name=share["name"],
            # a job that may not borrow has a share that cannot, as far as it goes
            policy=share["policy"] if job.may_borrow else "LEND",
            limits=limits.get(job.share_id, {}),
            borrow_limit=share["borrow_limit"],
            capacity=capacity.get(job.queue_id, {}),
        )
        if blockers is not None:
            out[job.pk] = blockers
    return out


# Forecasts, cached the same way as the reasons (same fingerprint, same lifetime): the
# playback runs one engine cycle per finishing instant, so it is computed at most once
# per stored state. The first time a job gets an estimate the scheduler records it
# (``scheduler/estimates.py``) to measure the forecast error later.


# An answer of the same state kept this much longer than it holds, served while one
# client computes the next (single flight: state_cache's module docstring).
KEPT_FOR = 60.0


def _per_job_cached(
    prefix: str,
    queue_id: int,
    wanted: list[int],
    fingerprint: str | None,
    compute: Callable[[], tuple[dict[int, Any], str, float | None]],
) -> tuple[dict[int, Any], str, bool]:
    """A per-job reading of the queue (``compute``: values by job id, a note such as the
    basis, and for how long it holds), cached as the reasons are: under the queue's
    stored state, per job, with the note written last (never half an answer); and
    whether the answer served is in the cache (served from it, or stored). Computed by
    one client at a time: the others serve the answer of the same state kept
    ``KEPT_FOR`` longer, or wait for it."""
    base = f"{prefix}:{fingerprint or state_cache.queue_state_fingerprint(queue_id)}"
    keys = {f"{base}:{pk}": pk for pk in wanted}
    ready, kept, lock = f"{base}:ok", f"{base}:kept", f"{base}:lock"
    found = state_cache.cache_get_many([ready, kept, *keys])
    token = None
    if ready not in found:
        token = state_cache.take_lock(lock)
        if token is None and kept in found:
            ready = kept  # another client computes the next answer: serve the kept one
        elif token is None:
            found = state_cache.wait_for([ready, *keys], ready)
    if ready in found:
        return {keys[k]: v for k, v in found.items() if k in keys}, str(found[ready]), True
    try:
        values, note, valid_for = compute()
        ttl = min(EXPLAIN_MAX_AGE, valid_for if valid_for is not None else EXPLAIN_MAX_AGE)
        stored = ttl >= 1
        if stored:
            entries = {f"{base}:{pk}": value for pk, value in values.items()}
            state_cache.cache_set_many(entries, ttl + KEPT_FOR)
            state_cache.cache_set_many({kept: note}, ttl + KEPT_FOR)
            state_cache.cache_set_many({ready: note}, ttl)
    finally:
        if token is not None:
            state_cache.release_lock(lock, token)
    wanted_set = set(wanted)
    return {pk: value for pk, value in values.items() if pk in wanted_set}, note, stored


def forecast_jobs(
    queue_id: int, job_ids: Iterable[int], fingerprint: str | None = None
) -> tuple[dict[int, dict[str, Any]], str]:
    """Pending job id -> ``{"position", "estimated_start" (aware datetime or None),
    "times_out"}`` for ``job_ids`` of the queue, and the basis of the estimates in words
    (``scheduler.engine.forecast``). Jobs not pending are absent."""
    wanted = list(job_ids)
    if not wanted:
        return {}, ""  # nothing asked: no playback (and no first estimates recorded)

    found, basis, _ = _per_job_cached(
        "forecast",
        queue_id,
        wanted,
        fingerprint,
        lambda: estimates.forecast_and_record_first(queue_id),
    )
    return {pk: _as_datetimes(v) for pk, v in found.items()}, basis


def entitled_forecast_jobs(
    queue_id: int, job_ids: Iterable[int], fingerprint: str | None = None
) -> tuple[dict[int, dict[str, Any]], str]:
    """Pending job id -> its start on its share's entitlement alone, ``{"estimated_start"
    (aware datetime or None), "times_out", "never"}`` (docs/insight.md), and the basis in
    words; cached as ``forecast_jobs`` is, apart from it (a second playback, paid only by
    the pages that show it)."""
    wanted = list(job_ids)
    if not wanted:
        return {}, ""
    found, basis, _ = _per_job_cached(
        "entitled",
        queue_id,
        wanted,
        fingerprint,
        lambda: readings.entitled_forecast_queue(queue_id),
    )
    return {pk: _as_datetimes(v) for pk, v in found.items()}, basis


def exposure_jobs(
    queue_id: int, job_ids: Iterable[int], fingerprint: str | None = None
) -> dict[int, dict[str, Any]]:
    """Running job id -> how exposed its run on borrowed capacity is
    (``readings.exposure_queue``), for the ``job_ids`` of the queue whose share borrows on
    their type; cached as the reasons are."""
    wanted = list(job_ids)
    if not wanted:
        return {}

    def compute() -> tuple[dict[int, Any], str, float | None]:
        found, valid_for = readings.exposure_queue(queue_id)
        return found, "", valid_for

    return _per_job_cached("exposure", queue_id, wanted, fingerprint, compute)[0]


def _as_datetimes(forecast: dict[str, Any]) -> dict[str, Any]:
    start = forecast["estimated_start"]
    return {
        **forecast,
        "estimated_start": datetime.fromtimestamp(start, tz=UTC) if start is not None else None,
    }


def forecast_job(job: Job) -> dict[str, Any]:
    """Position, estimated start and its basis of one pending job (None values when the
    job is not pending, or the playback gives it no start)."""
    empty = {"position": None, "estimated_start": None, "estimate_basis": None}
    if job.state != JobState.PENDING:
        return empty
    found, basis = forecast_jobs(job.queue_id, [job.pk])
    forecast = found.get(job.pk)
    if forecast is None:
        return {**empty, "estimate_basis": basis}
    text = basis
    if forecast["estimated_start"] is None:
        text = (
            "times out before it starts, by " + basis
            if forecast["times_out"]
            else "no start found by " + basis
        )
    return {
        "position": forecast["position"],
        "estimated_start": forecast["estimated_start"],
        "estimate_basis": text,
    }


def preview_share_change(
    *, actor: AnyUser, share: Share, proposed: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """What the next cycle would do if ``share`` took the ``proposed`` fields (as the share
    service takes them); invalid values raise ``ValidationFailed``. Only admins change
    shares, so only they preview."""
    if not roles.may_change_shares(actor):
        raise PermissionDenied({"detail": ["Only admins edit shares, so only they preview."]})
    return readings.preview_share_change(share, validate_share_fields(share, proposed))


def change_request_preview(share: Share, proposed: dict[str, Any]) -> dict[str, Any]:
    """The share editor's preview of ``proposed`` (``preview_share_change``'s three lists)
    with its warnings (``share_change_warnings``) under ``warnings``: what a change
    request stores when it is filed and again when it is decided. The change request
    service checks who may file and decide; invalid values raise ``ValidationFailed``."""
    preview: dict[str, Any] = dict(
        readings.preview_share_change(share, validate_share_fields(share, proposed))
    )
    preview["warnings"] = share_change_warnings(share, proposed)
    return preview


def engine_usage(queue_id: int) -> list[dict[str, Any]]:
    """Per share and type accounting as the engine itself holds it."""
    return readings.usage(queue_id)


def queue_history(queue: JobQueue, start: datetime, stop: datetime) -> dict[str, Any]:
    """The queue's recorded history over ``[start, stop)`` as a replayable scenario
    (docs/signals.md, "History export")."""
    return history.export(queue, start, stop, now=timezone.now())


# The lending ledger (docs/ledger.md): the engine's reading of now, and a window of
# the queue's whole recording (the export from its first submission, so a run going at
# the window's start is counted from the start, as the signals count runs).
MAX_LEDGER_RECLAIMS = 5000


def share_ledger(share: Share, start: datetime, stop: datetime) -> dict[str, Any]:
    """The lending ledger of ``share``: ``now`` (``readings.lending_now``) and the window
    ``[start, stop)``: instance-seconds lent per borrowing share and type, borrowed per
    lender (or source) and type, the reclaims the share's jobs made and those its jobs
    suffered, with the work lost. Exact: computed for the call (the API's answer)."""
    window = ledger_window(share, start, stop, now=timezone.now())
    return with_now(window, readings.lending_now(share))


def with_now(window: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """A ledger's window part with its ``now``, in the answer's order (docs/ledger.md)."""
    answer = {"share": window.get("share"), "window": window.get("window"), "now": now}
    answer.update(window)
    return answer


def lending_now(share: Share, *, fingerprint: str | None = None) -> dict[str, Any]:
    """The ledger page's ``now``: who holds the share's idle entitlement and whose it
    holds, and what its pending jobs would reclaim, read from the live state; cached as
    the reasons are (under the queue's stored state, at most EXPLAIN_MAX_AGE, one client
    computing it at a time), its ``at`` saying when it was read. The API's ledger reads
    it afresh (``share_ledger``). ``fingerprint``: the queue's
    ``state_cache.queue_state_fingerprint`` when the caller read it already."""
    if fingerprint is None:
        fingerprint = state_cache.queue_state_fingerprint(share.queue_id)
    return state_cache.cached(
        f"lending-now:{fingerprint}:{share.pk}",
        lambda: readings.lending_now(share),
        EXPLAIN_MAX_AGE,
    )


def share_ledger_as_of(
    share: Share,
    start: datetime,
    stop: datetime,
    *,
    span: timedelta | None = None,
    version: str | None = None,
) -> live_answers.Live:
    """The window part of ``share_ledger`` for a page (everything but ``now``, which the
    page reads live): exact when the window has closed; for a window that ends now, the
    kept answer as of its time (``scheduler/live_answers.py``), ``span`` naming a rolling
    window (``[as_of - span, as_of)``) rather than the fixed ``[start, stop)``; kept
    under the queue's record version (``state_cache.queue_record_version``; ``version``:
    that version when the caller read it already)."""
    now = timezone.now()
    if span is None and signal_store.is_closed(stop, now):
        return live_answers.Live(ledger_window(share, start, stop, now=now), None)
    return live_answers.serve(
        "ledger",
        {"share": share.pk, **_window_params(start, stop, span)},
        version or state_cache.queue_record_version(share.queue_id),
    )


def _window_params(start: datetime, stop: datetime, span: timedelta | None) -> dict[str, Any]:
    if span is not None:
        return {"span": span.total_seconds()}
    return {"from": start.isoformat(), "to": stop.isoformat()}


def _window_of(params: dict[str, Any], now: datetime) -> tuple[datetime, datetime]:
    """The window ``_window_params`` describes, as of ``now``."""
    if params.get("span") is not None:
        return now - timedelta(seconds=float(params["span"])), now
    return datetime.fromisoformat(params["from"]), datetime.fromisoformat(params["to"])


def ledger_window(
    share: Share, start: datetime, stop: datetime, *, now: datetime
) -> dict[str, Any]:
    """The window part of ``share_ledger``, recorded up to ``now``."""
    # The recording with the state at ``start`` as it was (docs/signals.md, "Rules of
    # counting"): runs going at ``start`` are counted from ``start`` on.
    window = history.signals_window(share.queue, start, stop, now=now)
    recording = window.recording
    led = ledger.compute(
        recording.scenario,
        recording.events,
        window.start,
        window.stop,
        window.stop if recording.end is None else recording.end,
    )
    key = share.name
    share_ids = dict(Share.objects.filter(queue_id=share.queue_id).values_list("name", "pk"))
    lent: list[dict[str, Any]] = []
    borrowed: list[dict[str, Any]] = []
    for (borrower, lender, source, type_name), amount in sorted(
        led.held.items(), key=lambda item: (item[0][0], str(item[0][1]), item[0][2], item[0][3])
    ):
        if not amount:
            continue
        seconds = led.seconds((borrower, lender, source, type_name))
        figures = {
            "instance_type": type_name,
            "instance_seconds": float(seconds),
            "instance_hours": float(seconds / 3600),
        }
        if lender == key:
            lent.append({"borrower": share_ids.get(borrower), "borrower_name": borrower, **figures})
        if borrower == key:
            borrowed.append(
                {"source": source, "lender": share_ids.get(lender or ""), "lender_name": lender}
                | figures
            )
    reclaims = _reclaims(share.queue_id, start, stop)
    triggered = [r for r in reclaims if r["by_share"] == share.pk]
    suffered = [r for r in reclaims if r["share"] == share.pk]
    return {
        "share": {"id": share.pk, "name": share.name, "queue": share.queue_id},
        "window": {"from": start.isoformat(), "to": stop.isoformat()},
        "lent": lent,
        "borrowed": borrowed,
        "reclaims_triggered": triggered,
        "reclaims_suffered": suffered,
        "lost_work_caused": sum(r["lost_work"] for r in triggered),
        "lost_work_suffered": sum(r["lost_work"] for r in suffered),
    }


def _live_ledger(params: dict[str, Any], now: datetime) -> dict[str, Any] | None:
    share = Share.objects.select_related("queue").filter(pk=params["share"]).first()
    if share is None:
        return None
    start, stop = _window_of(params, now)
    return ledger_window(share, start, stop, now=now)


def _reclaims(queue_id: int, start: datetime, stop: datetime) -> list[dict[str, Any]]:
    """The queue's reclaims in ``[start, stop)`` from the jobs' timelines: each victim
    with its run (the type and count of its admission before), the job that took the
    capacity back and the work the victim lost (work-seconds, as recorded)."""
    events = list(
        JobEvent.objects.filter(
            job__queue_id=queue_id,
            type="preempted",
            at__gte=start,
            at__lt=stop,
            data__reason=DecisionRule.RECLAIM,
        )
        .select_related("job", "job__share")
        .order_by("at", "id")[:MAX_LEDGER_RECLAIMS]
    )
    by_ids = {e.data.get("by") for e in events if isinstance(e.data.get("by"), int)}
    by_jobs = {j.pk: j for j in Job.objects.filter(pk__in=by_ids).select_related("share")}
    runs: dict[int, list[tuple[datetime, dict[str, Any]]]] = {}
    for job_id, at, data in JobEvent.objects.filter(
        job_id__in={e.job_id for e in events}, type="admitted", at__lt=stop
    ).values_list("job_id", "at", "data"):
        runs.setdefault(job_id, []).append((at, data))
    out = []
    for event in events:
        admitted = [
            d for at, d in sorted(runs.get(event.job_id, []), key=lambda r: r[0]) if at <= event.at
        ]
        run = admitted[-1] if admitted else {}
        by = by_jobs.get(event.data.get("by"))
        out.append(
            {
                "at": event.at.isoformat(),
                "job": event.job_id,
                "job_name": event.job.name,
                "share": event.job.share_id,
                "share_name": event.job.share.name,
                "by": by.pk if by else None,
                "by_name": by.name if by else "",
                "by_share": by.share_id if by else None,
                "by_share_name": by.share.name if by else "",
                "instance_type": run.get("instance_type"),
                "count": run.get("count"),
                "lost_work": float(event.data.get("lost_work") or 0),
            }
        )
    return out


def queue_signals(
    queue: JobQueue,
    start: datetime,
    stop: datetime,
    *,
    group_by: str = "share",
    now: datetime | None = None,
) -> dict[str, Any]:
    """Every signal of docs/signals.md for the queue over ``[start, stop)``, per share or team:
    computed from the queue's recording with the state at ``start`` as it was (runs
    going, earlier admissions and preemptions) plus the audit entries that count as
    policy changes, with the end of the recording at ``min(stop, now)``. A window that has
    ended is answered from the store when nothing recorded since could change it
    (docs/signals.md#stored-answers). Exact: the API's answer."""
    now = now or timezone.now()
    answer = signal_store.window_signals(queue, start, stop, now=now, group_by=group_by)
    answer["window"] = {"from": start.isoformat(), "to": stop.isoformat()}
    answer["queue"] = {"id": queue.pk, "name": queue.name, **answer["queue"]}
    return answer


def queue_signals_as_of(
    queue: JobQueue,
    start: datetime,
    stop: datetime,
    *,
    group_by: str = "share",
    span: timedelta | None = None,
) -> live_answers.Live:
    """``queue_signals`` for a page: exact when the window has closed (the store); for a
    window that ends now, the kept answer as of its time (``scheduler/live_answers.py``,
    docs/signals.md#windows-that-end-now), whose ``window`` says which window it counts;
    ``span`` names a rolling window (``[as_of - span, as_of)``)."""
    now = timezone.now()
    if span is None and signal_store.is_closed(stop, now):
        return live_answers.Live(queue_signals(queue, start, stop, group_by=group_by), None)
    params = {"queue": queue.pk, "group_by": group_by, **_window_params(start, stop, span)}
    return live_answers.serve("signals", params, state_cache.queue_record_version(queue.pk))


def _live_signals(params: dict[str, Any], now: datetime) -> dict[str, Any] | None:
    queue = JobQueue.objects.filter(pk=params["queue"]).first()
    if queue is None:
        return None
    start, stop = _window_of(params, now)
    return queue_signals(queue, start, stop, group_by=params["group_by"], now=now)


def promise_figures() -> tuple[str, ...]:
    """The signals a promise may name, by path (read off the signals' own answer)."""
    return promises.figure_paths()


def promise_is_fraction(path: str) -> bool:
    """Whether the figure at ``path`` lies in [0, 1]."""
    return promises.is_fraction(path)


def promise_unit(path: str) -> str:
    """What the figure at ``path`` counts (``seconds``, ``fraction``, ``count``, ``ratio``
    or ``money``), so a page writes its value the product's way."""
    return promises.unit(path)


def promise_judge(
    answer: dict[str, Any],
    *,
    group_by: str,
    name: str,
    figure: str,
    comparison: str,
    threshold: float,
) -> tuple[float | None, str]:
    """(value, ``kept``/``broken``/``no_data``) of a promise on a ``queue_signals`` answer
    grouped by ``group_by``, for the group ``name``."""
    return promises.evaluate(
        answer,
        group_by=group_by,
        name=name,
        figure=figure,
        comparison=comparison,
        threshold=threshold,
    )


def signals_rows(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The signals answer as a flat table (``?format=csv``)."""
    return signals.flat_rows(answer)


def chargeback(
    start: datetime, stop: datetime, *, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Per team, queue and type: instance-seconds and cost over ``[start, stop)`` (a
    month), split own / borrowed, from each queue's signals grouped by team. Exact."""
    rows: list[dict[str, Any]] = []
    label = start.strftime("%Y-%m")
    now = now or timezone.now()
    for queue in JobQueue.objects.order_by("name"):
        answer = queue_signals(queue, start, stop, group_by="team", now=now)
        for group in answer["groups"]:
            for type_name, seconds in group["instance_seconds"].items():
                cost = group["cost"][type_name]
                if not seconds["total"]:
                    continue
                rows.append(
                    {
                        "month": label,
                        "team": group["team"],
                        "queue": queue.name,
                        "instance_type": type_name,
                        "own_instance_seconds": round(seconds["own"], 3),
                        "borrowed_instance_seconds": round(seconds["borrowed"], 3),
                        "own_cost": round(cost["own"], 4),
                        "borrowed_cost": round(cost["borrowed"], 4),
                        "total_cost": round(cost["total"], 4),
                    }
                )
    rows.sort(key=lambda r: (r["team"], r["queue"], r["instance_type"]))
    return rows


def chargeback_as_of(start: datetime, stop: datetime) -> live_answers.Live:
    """``chargeback`` for a page, as ``{"rows": [...]}``: exact for a month that has ended,
    else the kept answer as of its time (``scheduler/live_answers.py``)."""
    now = timezone.now()
    if signal_store.is_closed(stop, now):
        return live_answers.Live({"rows": chargeback(start, stop, now=now)}, None)
    return live_answers.serve(
        "chargeback",
        {"from": start.isoformat(), "to": stop.isoformat()},
        state_cache.queue_record_version(),
    )


def _live_chargeback(params: dict[str, Any], now: datetime) -> dict[str, Any]:
    start, stop = _window_of(params, now)
    return {"rows": chargeback(start, stop, now=now)}


# What the pages' answers of windows that end now compute, here and in the worker's
# recompute task alike (scheduler/live_answers.py).
live_answers.register("signals", _live_signals)
live_answers.register("ledger", _live_ledger)
live_answers.register("chargeback", _live_chargeback)


def whatif_replay(history_data: dict[str, Any], proposal: dict[str, Any]) -> dict[str, Any]:
    """Replay an exported history (a queue's or a file's) as it was and with ``proposal``
    in this process (``manage.py whatif``); raises ``ValidationFailed`` naming the field
    for a proposal that does not fit the history."""
    try:
        return whatif.run(history_data, proposal)
    except whatif.ProposalError as exc:
        raise ValidationFailed(dict(exc.problems.items())) from exc


def replay(scenario: dict[str, Any]) -> dict[str, Any]:
    """Play a scenario through the engine (``python -m scheduler.simulate``'s result)."""
    return simulate.run(scenario)


def share_change_warnings(
    share: Share, proposed: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """What an admin should know before saving ``proposed`` (as the share service takes
    them; invalid values raise ``ValidationFailed``): ``over_allocated``, the types whose
    limits would add up to more than the queue's capacity (entitlements then honoured
    only as capacity allows), and ``never_start``, this share's pending jobs that could
    never start under the proposed settings."""
    values = validate_share_fields(share, proposed)
    limits: dict[str, int] = values["limits"]
    capacity = dict(
        QueueCapacity.objects.filter(queue_id=share.queue_id).values_list(
            "instance_type__name", "count"
        )
    )
    others: dict[str, int] = {}
    for type_name, count in (
        ShareLimit.objects.filter(share__queue_id=share.queue_id)
        .exclude(share_id=share.pk)
        .values_list("instance_type__name", "count")
    ):
        others[type_name] = others.get(type_name, 0) + count
    over = []
    for type_name, count in sorted(limits.items()):
        total = others.get(type_name, 0) + count
        cap = capacity.get(type_name, 0)
        if total > cap:
            over.append(
                {
                    "instance_type": type_name,
                    "limits": total,
                    "capacity": cap,
                    "over_by": total - cap,
                }
            )
    never = []
    pending = (
        Job.objects.filter(share=share, state=JobState.PENDING)
        .only("id", "name", "preferences")
        .order_by("submitted_at", "id")
    )
    for job in pending[:500]:
        blockers = start_blockers(
            list(job.preferences or []),
            share_name=share.name,
            policy=values["policy"],
            limits=limits,
            borrow_limit=values["borrow_limit"],
            capacity=capacity,
        )
        if blockers is not None:
            never.append({"job": job.pk, "name": job.name, "blockers": blockers})
    return {"over_allocated": over, "never_start": never}
