"""Promises of allocation agreements (docs/agreements.md#promises): checking them as part
of an agreement's versions, and evaluating them against the recorded history.

A promise names a signal by its path (``wait_to_start.entitled.p90``), a share or a team
of the agreement (a team on one queue), ``<=`` or ``>=``, a threshold and a window in
days. The promisable paths are the signals' own (``scheduling.promise_figures``), so a
figure the signals gain is promisable at once.

Evaluation asks the same signals ``/api/signals/`` answers (``scheduling.queue_signals``)
for the window ``[stop - window_days, stop)``, once per queue, window and grouping,
however many promises read it. Each evaluation is kept; a promise that turns ``broken``
tells the agreement's owner and the reviewers, once per turn.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from governance.models import (
    Agreement,
    NotificationKind,
    Promise,
    PromiseEvaluation,
    PromiseState,
    Share,
)
from governance.selectors import scheduling
from governance.services import audit, notifications
from governance.services.errors import Errors
from governance.services.limits import is_int
from governance.templatetags import figures

MAX_PROMISES = 20
MAX_WINDOW_DAYS = 365
# Seconds, counts and money: far beyond any figure a queue produces, and a float.
MAX_THRESHOLD = 1e12
COMPARISONS = ("<=", ">=")
FIELDS = ("figure", "share", "team", "queue", "comparison", "threshold", "window_days")


def figure_choices() -> tuple[str, ...]:
    """The paths a promise may name."""
    return scheduling.promise_figures()


def promise_snapshot(promise: Promise) -> dict[str, Any]:
    """A promise as JSON (audit entries, version snapshots, the API)."""
    return audit.fields_of(
        promise, "figure", "share", "team", "queue", "comparison", "threshold", "window_days"
    )


def _key(item: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(item[f] for f in FIELDS)


def active_promises(agreement: Agreement) -> list[dict[str, Any]]:
    """The agreement's promises now, as snapshots in a stable order."""
    rows = agreement.promises.filter(removed_in_version__isnull=True).order_by("id")
    return [promise_snapshot(p) for p in rows]


def clean_promises(errors: Errors, items: Any, shares: Iterable[Share]) -> list[dict[str, Any]]:
    """The promises ``items`` (a list of objects with FIELDS) checked against the
    agreement's ``shares``: each problem is a field error ``promises[i].FIELD``.

    Long because it is the flat list of a promise's field rules, each independent, in the
    order they are reported."""
    if not isinstance(items, list):
        errors.add("promises", "Give a list of promises.")
        return []
    if len(items) > MAX_PROMISES:
        errors.add("promises", f"At most {MAX_PROMISES} promises.")
        return []
    linked = list(shares)
    by_id = {s.pk: s for s in linked}
    team_queues: dict[int, set[int]] = {}
    for share in linked:
        team_queues.setdefault(share.team_id, set()).add(share.queue_id)
    figures = set(figure_choices())
    out: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        at = f"promises[{index}]"
        if not isinstance(item, dict):
            errors.add(
                at,
                "Give an object with figure, share or team, comparison, threshold and window_days.",
            )
            continue
        unknown = sorted(str(k)[:50] for k in item if k not in FIELDS)
        for key in unknown:
            errors.add(f"{at}.{key}", "Not a field of a promise.")
        figure = item.get("figure")
        if not isinstance(figure, str) or figure not in figures:
            errors.add(
                f"{at}.figure",
                f"Unknown figure {str(figure)[:100]!r}: name a signal by its path, e.g. "
                "wait_to_start.entitled.p90 or goodput.",
            )
            figure = None
        comparison = item.get("comparison")
        if comparison not in COMPARISONS:
            errors.add(f"{at}.comparison", "Give <= or >=.")
        threshold = item.get("threshold")
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            errors.add(f"{at}.threshold", "Give a number.")
            threshold = None
        elif threshold != threshold or threshold < 0:  # NaN, or below every figure
            errors.add(f"{at}.threshold", "A figure is never negative: give 0 or more.")
            threshold = None
        elif figure is not None and scheduling.promise_is_fraction(figure) and threshold > 1:
            errors.add(f"{at}.threshold", f"{figure} is a fraction: give a number from 0 to 1.")
            threshold = None
        elif threshold > MAX_THRESHOLD:
            errors.add(f"{at}.threshold", f"At most {MAX_THRESHOLD:g}.")
            threshold = None
        window = item.get("window_days")
        if (
            not isinstance(window, int)
            or isinstance(window, bool)
            or not 1 <= window <= MAX_WINDOW_DAYS
        ):
            errors.add(f"{at}.window_days", f"A whole number of days from 1 to {MAX_WINDOW_DAYS}.")
        share_id, team_id, queue_id = item.get("share"), item.get("team"), item.get("queue")
        if queue_id is not None and not is_int(queue_id):
            errors.add(f"{at}.queue", "Give the id of a queue, or leave it out.")
            queue_id = None
        if (share_id is None) == (team_id is None):
            errors.add(f"{at}.share", "Name either a share or a team of the agreement.")
        elif share_id is not None:
            found = by_id.get(share_id) if is_int(share_id) else None
            if found is None:
                errors.add(f"{at}.share", "Not a share of this agreement.")
            elif queue_id is not None and queue_id != found.queue_id:
                errors.add(f"{at}.queue", "The share is on another queue.")
            else:
                queue_id = found.queue_id
        else:
            queues = team_queues.get(team_id, set()) if isinstance(team_id, int) else set()
            if not queues:
                errors.add(f"{at}.team", "Not the team of a share of this agreement.")
            elif queue_id is None and len(queues) > 1:
                errors.add(f"{at}.queue", "The team's shares are on several queues: name one.")
            elif queue_id is not None and queue_id not in queues:
                errors.add(f"{at}.queue", "The team has no share of this agreement on it.")
            elif queue_id is None:
                queue_id = next(iter(queues))
        out.append(
            {
                "figure": figure,
                "share": share_id,
                "team": team_id,
                "queue": queue_id,
                "comparison": comparison,
                "threshold": float(threshold) if threshold is not None else None,
                "window_days": window,
            }
        )
    return out


def apply_promises(agreement: Agreement, cleaned: list[dict[str, Any]], version: int) -> None:
    """Make ``cleaned`` the agreement's promises as of ``version``: promises that stay
    keep their history, the others are withdrawn by it, new ones added by it."""
    wanted = {_key(item): item for item in cleaned}
    for promise in agreement.promises.filter(removed_in_version__isnull=True):
        key = _key(promise_snapshot(promise))
        if key in wanted:
            wanted.pop(key)
        else:
            promise.removed_in_version = version
            promise.save(update_fields=["removed_in_version"])
    for item in wanted.values():
        Promise.objects.create(
            agreement=agreement,
            figure=item["figure"],
            share_id=item["share"],
            team_id=item["team"],
            queue_id=item["queue"],
            comparison=item["comparison"],
            threshold=item["threshold"],
            window_days=item["window_days"],
            added_in_version=version,
        )


# --- evaluation ----------------------------------------------------------------------------


def _subject(promise: Promise) -> tuple[str, str]:
    """("share" or "team", its name): the group of the signals the promise reads."""
    if promise.share is not None:
        return "share", promise.share.name
    assert promise.team is not None  # a promise names a share or a team (a constraint)
    return "team", promise.team.name


def evaluate(
    promises: Iterable[Promise], *, stop: datetime
) -> list[tuple[Promise, float | None, str, datetime]]:
    """(promise, value, state, window start) of each promise for the window ending at
    ``stop``; the signals of each queue, window and grouping are computed once.

    A team with one share on the queue is that share's group (a team's figures are the
    union of its shares'), so its promises read the share grouping, unless they name
    ``policy_changes``, which a team counts over every entry about the team."""
    answers: dict[tuple[int, int, str], dict[str, Any]] = {}
    only_share: dict[tuple[int, int], str | None] = {}
    out = []
    for promise in promises:
        group_by, name = _subject(promise)
        if group_by == "team" and not promise.figure.startswith("policy_changes"):
            key_team = (promise.team_id or 0, promise.queue_id)
            if key_team not in only_share:
                names = list(
                    Share.objects.filter(
                        team_id=key_team[0], queue_id=promise.queue_id
                    ).values_list("name", flat=True)[:2]
                )
                only_share[key_team] = names[0] if len(names) == 1 else None
            if only_share[key_team] is not None:
                group_by, name = "share", str(only_share[key_team])
        start = stop - timedelta(days=promise.window_days)
        key = (promise.queue_id, promise.window_days, group_by)
        if key not in answers:
            answers[key] = scheduling.queue_signals(promise.queue, start, stop, group_by=group_by)
        value, state = scheduling.promise_judge(
            answers[key],
            group_by=group_by,
            name=name,
            figure=promise.figure,
            comparison=promise.comparison,
            threshold=promise.threshold,
        )
        out.append((promise, value, state, start))
    return out


def _active(queryset: QuerySet[Promise]) -> QuerySet[Promise]:
    return (
        queryset.filter(removed_in_version__isnull=True)
        .select_related("agreement", "share", "team", "queue")
        .order_by("queue_id", "window_days", "id")
    )


def promises_evaluate(
    *,
    stop: datetime | None = None,
    agreements: Iterable[int] | None = None,
) -> list[Promise]:
    """Evaluate the promises in force (of ``agreements``, else all) for the windows ending
    at ``stop`` (default now), keep each result and tell the owner and the reviewers of a
    promise that turns ``broken``. On request: ``agreements.agreement_evaluate``."""
    stop = stop or timezone.now()
    queryset = Promise.objects.all()
    if agreements is not None:
        queryset = queryset.filter(agreement_id__in=list(agreements))
    promises = list(_active(queryset))
    results = evaluate(promises, stop=stop)
    now = timezone.now()
    evaluations = []
    told: set[int] | None = None
    with transaction.atomic():
        # one locking read of the states before and one write of the new ones, whatever
        # the number of promises (a daily pass evaluates every promise in force)
        previous_states = dict(
            Promise.objects.select_for_update()
            .filter(pk__in=[promise.pk for promise, *_ in results])
            .order_by("pk")
            .values_list("pk", "state")
        )
        for promise, value, state, start in results:
            previous = previous_states.get(promise.pk)
            evaluations.append(
                PromiseEvaluation(
                    promise=promise,
                    window_start=start,
                    window_stop=stop,
                    value=value,
                    state=state,
                    evaluated_at=now,
                )
            )
            promise.state, promise.value, promise.evaluated_at = state, value, now
            promise.window_start, promise.window_stop = start, stop
            if state == PromiseState.BROKEN and previous != PromiseState.BROKEN:
                if told is None:  # read once for the pass, however many promises break
                    told = notifications.reviewers()
                _tell_broken(promise, value, start, stop, told)
        Promise.objects.bulk_update(
            [promise for promise, *_ in results],
            ["state", "value", "evaluated_at", "window_start", "window_stop"],
            batch_size=500,
        )
        PromiseEvaluation.objects.bulk_create(evaluations)
    return [promise for promise, *_ in results]


def written(promise: Promise, value: float | None) -> str:
    """A value of the promise's figure as every page writes what it counts (a wait of
    10940 s is "3.0 h", a goodput of 0.9 "90.0 %"); the API keeps the raw number."""
    return figures.figure(value, scheduling.promise_unit(promise.figure))


def describe(promise: Promise) -> str:
    """``wait_to_start.entitled.p90 <= 60 min for share vision over 30 days``."""
    kind, name = _subject(promise)
    subject = f"{kind} {name}"
    return (
        f"{promise.figure} {promise.comparison} {written(promise, promise.threshold)} "
        f"for {subject} over {promise.window_days} days"
    )


def _tell_broken(
    promise: Promise, value: float | None, start: datetime, stop: datetime, reviewers: set[int]
) -> None:
    agreement = promise.agreement
    notifications.tell(
        kind=NotificationKind.PROMISE_BROKEN,
        key=f"promise.broken:{promise.pk}:{stop.isoformat()}",
        recipients={agreement.owner_id} | reviewers,
        title=f"Agreement '{agreement.title}' broke a promise: {describe(promise)}",
        body=(
            f"The figure was {written(promise, value)} over {start:%Y-%m-%d %H:%M} to "
            f"{stop:%Y-%m-%d %H:%M} UTC."
        ),
        url=reverse("web:agreement", args=[agreement.pk]),
        at=stop,
    )
