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
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from governance import roles
from governance.celery import app as celery_app
from governance.models import Job, JobQueue, JobState, Share
from governance.roles import AnyUser
from governance.selectors import web_state
from governance.services import insight
from governance.services.errors import PermissionDenied, ValidationFailed
from governance.services.shares import validate_share_fields
from scheduler import history, readings, signals, simulate, whatif
from scheduler.engine import accounting
from scheduler.engine.accounting import ShareOnType, TypeAccount, account_type

__all__ = [
    "ShareOnType",
    "TypeAccount",
    "account_type",
    "accounting",
    "chargeback",
    "engine_usage",
    "explain_generation",
    "explain_job",
    "explain_jobs",
    "forecast_jobs",
    "preview_share_change",
    "queue_history",
    "queue_signals",
    "replay",
    "signals_rows",
    "whatif_replay",
    "whatif_start",
]


# Why jobs wait, cached. Asking the engine means loading the queue's every active job
# into it and playing the cycle due now: ~100 ms on a queue of a few thousand pending
# jobs, far too slow for a page polled by many people. The answer depends only on what
# ``scheduler.bridge.load`` reads (the queue's active jobs, shares, limits, capacity and types) and,
# on a simulated queue, on the next run that finishes by itself. So it is cached under a
# fingerprint of those rows (``web_state.queue_state_fingerprint``), for as long as
# ``scheduler.readings.explain_queue`` says it holds, at most EXPLAIN_MAX_AGE. A page
# therefore never shows reasons for a state other than the stored one. Entries are per
# job, so a page reads only its own 50.
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
    caller passes the queue's ``web_state.queue_state_fingerprint`` it already read.
    ``generation``, when given, receives the cached answer's token (explain_generation)
    if the answer served is a cached one."""
    wanted = list(job_ids)
    base = f"explain:{fingerprint or web_state.queue_state_fingerprint(queue_id)}"
    keys = {f"{base}:{pk}": pk for pk in wanted}
    found = web_state.cache_get_many([f"{base}:ok", *keys])
    if f"{base}:ok" in found:
        if generation is not None and isinstance(found[f"{base}:ok"], str):
            generation.append(found[f"{base}:ok"])
        return {keys[key]: value for key, value in found.items() if key in keys}
    reasons, valid_for = readings.explain_queue(queue_id)
    ttl = min(EXPLAIN_MAX_AGE, valid_for if valid_for is not None else EXPLAIN_MAX_AGE)
    if ttl >= 1:
        web_state.cache_set_many({f"{base}:{pk}": value for pk, value in reasons.items()}, ttl)
        # Last: never half an answer. Its value names this answer (explain_generation).
        token = uuid.uuid4().hex
        web_state.cache_set_many({f"{base}:ok": token}, ttl)
        if generation is not None:
            generation.append(token)
    wanted_set = set(wanted)
    return {pk: value for pk, value in reasons.items() if pk in wanted_set}


def explain_generation(queue_id: int, fingerprint: str) -> str | None:
    """A token naming the reasons ``explain_jobs`` serves for the queue in the state
    ``fingerprint`` now (a new one each time the engine is asked again); None when none
    are cached. What is rendered from the reasons may be cached under it."""
    key = f"explain:{fingerprint}:ok"
    token = web_state.cache_get_many([key]).get(key)
    return token if isinstance(token, str) else None


def explain_job(job: Job) -> list[dict[str, Any]]:
    """Why one pending job waits (empty when it does not)."""
    if job.state != JobState.PENDING:
        return []
    return explain_jobs(job.queue_id, [job.pk]).get(job.pk, [])


# Forecasts, cached the same way as the reasons (same fingerprint, same lifetime): the
# playback runs one engine cycle per finishing instant, so it is computed at most once
# per stored state. The first time a job gets an estimate it is recorded
# (``services.insight.forecasts_record_first``) to measure the forecast error later.


def forecast_jobs(
    queue_id: int, job_ids: Iterable[int], fingerprint: str | None = None
) -> tuple[dict[int, dict[str, Any]], str]:
    """Pending job id -> ``{"position", "estimated_start" (aware datetime or None),
    "times_out"}`` for ``job_ids`` of the queue, and the basis of the estimates in words
    (``scheduler.engine.forecast``). Jobs not pending are absent."""
    wanted = list(job_ids)
    if not wanted:
        return {}, ""  # nothing asked: no playback (and no first estimates recorded)
    base = f"forecast:{fingerprint or web_state.queue_state_fingerprint(queue_id)}"
    keys = {f"{base}:{pk}": pk for pk in wanted}
    found = web_state.cache_get_many([f"{base}:ok", *keys])
    if f"{base}:ok" in found:
        basis = str(found[f"{base}:ok"])
        return {keys[k]: _as_datetimes(v) for k, v in found.items() if k in keys}, basis
    forecasts, basis, valid_for = readings.forecast_queue(queue_id)
    now = datetime.now(tz=UTC)
    insight.forecasts_record_first(
        queue_id=queue_id,
        estimates={
            pk: (datetime.fromtimestamp(f["estimated_start"], tz=UTC), f["position"])
            for pk, f in forecasts.items()
            if f["estimated_start"] is not None
        },
        basis=basis,
        now=now,
    )
    ttl = min(EXPLAIN_MAX_AGE, valid_for if valid_for is not None else EXPLAIN_MAX_AGE)
    if ttl >= 1:
        web_state.cache_set_many({f"{base}:{pk}": value for pk, value in forecasts.items()}, ttl)
        web_state.cache_set_many({f"{base}:ok": basis}, ttl)
    wanted_set = set(wanted)
    return {pk: _as_datetimes(v) for pk, v in forecasts.items() if pk in wanted_set}, basis


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


def engine_usage(queue_id: int) -> list[dict[str, Any]]:
    """Per share and type accounting as the engine itself holds it."""
    return readings.usage(queue_id)


def queue_history(queue: JobQueue, start: datetime, stop: datetime) -> dict[str, Any]:
    """The queue's recorded history over ``[start, stop)`` as a replayable scenario
    (DESIGN 8, "History export")."""
    return history.export(queue, start, stop, now=timezone.now())


def queue_signals(
    queue: JobQueue, start: datetime, stop: datetime, *, group_by: str = "share"
) -> dict[str, Any]:
    """Every signal of DESIGN 8 for the queue over ``[start, stop)``, per share or team:
    computed from the history export plus the audit entries that count as policy
    changes, with the end of the recording at ``min(stop, now)``."""
    now = timezone.now()
    exported = history.export(queue, start, stop, now=now)
    length = int((stop - start).total_seconds() * 1000)
    end = max(0, min(length, int((now - start).total_seconds() * 1000)))
    recording = signals.Recording(
        scenario=exported["scenario"],
        events=exported["recorded"],
        teams=exported["teams"],
        audit=history.policy_entries(queue, start, stop),
        end=end,
    )
    answer = signals.compute(recording, 0, length, group_by=group_by)
    answer["window"] = {"from": start.isoformat(), "to": stop.isoformat()}
    answer["queue"] = {"id": queue.pk, "name": queue.name, **answer["queue"]}
    return answer


def signals_rows(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The signals answer as a flat table (``?format=csv``)."""
    return signals.flat_rows(answer)


def chargeback(start: datetime, stop: datetime) -> list[dict[str, Any]]:
    """Per team, queue and type: instance-seconds and cost over ``[start, stop)`` (a
    month), split own / borrowed, from each queue's signals grouped by team."""
    rows: list[dict[str, Any]] = []
    label = start.strftime("%Y-%m")
    for queue in JobQueue.objects.order_by("name"):
        answer = queue_signals(queue, start, stop, group_by="team")
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


def whatif_start(whatif_id: int) -> None:
    """Queue the replay of a requested what-if once the request's transaction commits."""
    # By name: the task module imports governance, so importing it here would make a loop.
    transaction.on_commit(
        lambda: celery_app.send_task("scheduler.tasks.run_whatif", args=(whatif_id,))
    )


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
