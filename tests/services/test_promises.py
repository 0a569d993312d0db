"""Promises of agreements (docs/agreements.md#promises) evaluated on a recorded history:
the queue of ``test_history.py`` run by the simulated fleet from 08:00:00 to 08:06:40.

What happened there, by hand: share beta's b1 is reclaimed at 10 s and again at 70 s
(the second fails it), b2 is preempted by priority at 22 s, b4 is cancelled before it
ever starts; b2 and b3 complete. So beta's four finished jobs (b1 failed, b2, b3, b4
cancelled) suffered 3 preemptions in their lives: 3 / 4 = 0.75 per finished job, and
3 preemptions suffered in all. Alpha is a LEND share: it never borrows, so none of its
jobs completes having borrowed and ``turnaround.borrowed.p50`` is null for it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from governance.models import Notification, NotificationKind, PromiseEvaluation, PromiseState
from governance.selectors import agreements as agreement_selectors
from governance.services import agreements as agreement_svc
from governance.services import promises as promise_svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.factories import make_reviewer
from tests.services.test_history import at, clock, run_history, world  # noqa: F401

pytestmark = pytest.mark.django_db


def promise(share: Any, figure: str, comparison: str, threshold: float) -> dict[str, Any]:
    return {
        "figure": figure,
        "share": share.pk,
        "comparison": comparison,
        "threshold": threshold,
        "window_days": 1,
    }


@pytest.fixture
def recorded(world: Any, clock: Any) -> Any:  # noqa: F811
    run_history(world, clock)
    clock.now = at(400)
    world.reviewer = make_reviewer("rev")
    world.agreement = agreement_svc.agreement_create(
        actor=world.admin,
        title="Beta borrows, alpha lends",
        shares=[world.alpha.pk, world.beta.pk],
        owner="red_lead",
        promises=[
            promise(world.beta, "preemptions_per_finished_job", "<=", 0.5),
            promise(world.beta, "preemptions_suffered.total", "<=", 3),
            promise(world.alpha, "turnaround.borrowed.p50", "<=", 60),
            {
                "figure": "jobs_finished.total",
                "team": world.beta.team_id,
                "comparison": ">=",
                "threshold": 4,
                "window_days": 1,
            },
        ],
    )
    return world


def states(agreement: Any) -> dict[str, tuple[str, float | None]]:
    return {p.figure: (p.state, p.value) for p in agreement.promises.all()}


def test_every_state_with_the_value_computed_by_hand(recorded: Any) -> None:
    promise_svc.promises_evaluate(stop=at(400))
    assert states(recorded.agreement) == {
        "preemptions_per_finished_job": (PromiseState.BROKEN, 0.75),
        "preemptions_suffered.total": (PromiseState.KEPT, 3.0),
        "turnaround.borrowed.p50": (PromiseState.NO_DATA, None),
        "jobs_finished.total": (PromiseState.KEPT, 4.0),
    }
    broken = recorded.agreement.promises.get(figure="preemptions_per_finished_job")
    assert broken.window_start == at(400) - timedelta(days=1)
    assert broken.window_stop == at(400)
    # the link names the share and the window, on the list of finished jobs
    link = agreement_selectors.promise_link(broken)
    assert link.startswith("/jobs/?") and f"share={recorded.beta.pk}" in link
    assert "finished_after=" in link


def test_a_window_that_ends_before_the_history_has_no_data_or_zero(recorded: Any) -> None:
    promise_svc.promises_evaluate(stop=at(0))
    assert states(recorded.agreement)["preemptions_per_finished_job"] == (
        PromiseState.NO_DATA,
        None,
    )
    assert states(recorded.agreement)["preemptions_suffered.total"] == (PromiseState.KEPT, 0.0)
    assert states(recorded.agreement)["jobs_finished.total"] == (PromiseState.BROKEN, 0.0)


def test_turning_broken_tells_the_owner_and_the_reviewers_once(recorded: Any) -> None:
    def told() -> list[tuple[str, str]]:
        rows = Notification.objects.filter(kind=NotificationKind.PROMISE_BROKEN)
        return sorted((n.recipient.username, n.title) for n in rows)

    promise_svc.promises_evaluate(stop=at(400))
    first = told()
    assert {name for name, _ in first} == {"red_lead", "rev", "admin"}
    assert all("preemptions_per_finished_job <= 0.5" in title for _, title in first)
    # evaluated again (on request, then by the daily pass): still broken, nobody told again
    promise_svc.promises_evaluate(stop=at(400) + timedelta(minutes=5))
    promise_svc.promises_evaluate(stop=at(400) + timedelta(days=0, hours=1))
    assert told() == first
    # history kept per promise
    broken = recorded.agreement.promises.get(figure="preemptions_per_finished_job")
    history = PromiseEvaluation.objects.filter(promise=broken).order_by("window_stop")
    assert [e.state for e in history] == [PromiseState.BROKEN] * 3
    assert [e.value for e in history] == [0.75, 0.75, 0.75]


def test_a_kept_promise_that_breaks_later_tells_then(recorded: Any) -> None:
    # before the history, jobs_finished.total >= 4 is broken for team blue (0 finished)...
    promise_svc.promises_evaluate(stop=at(0))
    early = Notification.objects.filter(kind=NotificationKind.PROMISE_BROKEN).count()
    assert early == 3  # the owner, the reviewer and the admin, for that one promise
    promise_svc.promises_evaluate(stop=at(400))  # kept now; the other promise turns broken
    assert Notification.objects.filter(kind=NotificationKind.PROMISE_BROKEN).count() == 6


def test_unknown_figures_and_impossible_thresholds_are_field_errors(recorded: Any) -> None:
    bad = [
        promise(recorded.beta, "wait_to_start.entitled.p95", "<=", 60),
        promise(recorded.beta, "goodput", ">=", 1.5),
        promise(recorded.beta, "fallback_rate", "<=", -0.1),
        {**promise(recorded.beta, "goodput", ">=", 0.9), "window_days": 0},
        {**promise(recorded.beta, "goodput", ">=", 0.9), "window_days": 366},
        {**promise(recorded.beta, "goodput", "<", 0.9)},
        {"figure": "goodput", "comparison": ">=", "threshold": 0.9, "window_days": 7},
    ]
    with pytest.raises(ValidationFailed) as caught:
        agreement_svc.agreement_update(
            actor=recorded.admin,
            agreement=recorded.agreement,
            version=recorded.agreement.version,
            promises=bad,
        )
    errors = caught.value.errors
    assert set(errors) == {
        "promises[0].figure",
        "promises[1].threshold",
        "promises[2].threshold",
        "promises[3].window_days",
        "promises[4].window_days",
        "promises[5].comparison",
        "promises[6].share",
    }
    assert "wait_to_start.entitled.p95" in errors["promises[0].figure"][0]


def test_promises_are_versions_of_the_agreement(recorded: Any) -> None:
    agreement = recorded.agreement
    promise_svc.promises_evaluate(stop=at(400))
    kept = agreement.promises.get(figure="preemptions_suffered.total")
    current = promise_svc.active_promises(agreement)
    withdrawn = [p for p in current if p["figure"] != "preemptions_per_finished_job"]
    updated = agreement_svc.agreement_update(
        actor=recorded.admin,
        agreement=agreement,
        version=agreement.version,
        promises=[dict(p) for p in reversed(withdrawn)],
        reason="the borrower's preemptions are its own risk",
    )
    assert updated.version == 2
    # the promises that stay keep their history; the withdrawn one is marked so
    assert agreement.promises.get(pk=kept.pk).evaluations.count() == 1
    gone = agreement.promises.get(figure="preemptions_per_finished_job")
    assert gone.removed_in_version == 2
    versions = {v.version: v for v in agreement.versions.all()}
    assert len(versions[1].promises) == 4 and len(versions[2].promises) == 3
    # the same list again (in another order) is no change
    again = agreement_svc.agreement_update(
        actor=recorded.admin,
        agreement=agreement,
        version=2,
        promises=[dict(p) for p in withdrawn],
    )
    assert again.version == 2


def test_only_people_of_the_agreement_and_reviewers_ask_for_an_evaluation(
    recorded: Any,
) -> None:
    with pytest.raises(PermissionDenied):
        agreement_svc.agreement_evaluate(actor=recorded.blue_lead, agreement=recorded.agreement)
    agreement_svc.agreement_evaluate(actor=recorded.reviewer, agreement=recorded.agreement)
    assert recorded.agreement.promises.filter(state="").count() == 0


def test_a_team_with_two_shares_is_judged_on_the_union_of_them(recorded: Any) -> None:
    """Alpha's jobs reclaimed beta's twice; red's second share (made after the history)
    ran nothing, so team red, read on the team grouping, caused 2 reclaims in all."""
    from tests.factories import make_share

    red_too = make_share(recorded.queue, recorded.alpha.team, "alpha-two", {"ml.g5.xlarge": 0})
    agreement = agreement_svc.agreement_create(
        actor=recorded.admin,
        title="Red, both shares",
        shares=[recorded.alpha.pk, red_too.pk],
        promises=[
            {
                "figure": "preemptions_caused.reclaim",
                "team": recorded.alpha.team_id,
                "comparison": "<=",
                "threshold": 1,
                "window_days": 1,
            }
        ],
    )
    promise_svc.promises_evaluate(stop=at(400), agreements=[agreement.pk])
    assert states(agreement) == {"preemptions_caused.reclaim": (PromiseState.BROKEN, 2.0)}


def test_beats_daily_pass_judges_the_windows_ending_at_midnight(recorded: Any) -> None:
    from datetime import UTC, datetime

    from governance import tasks

    assert tasks.evaluate_promises() == 4  # at 08:06:40 on 3 March: windows end at 00:00
    midnight = datetime(2025, 3, 3, tzinfo=UTC)
    for promise in recorded.agreement.promises.all():
        assert promise.window_stop == midnight
        assert promise.window_start == midnight - timedelta(days=promise.window_days)
    # the history came after midnight: nothing finished in the window before it
    assert states(recorded.agreement)["jobs_finished.total"] == (PromiseState.BROKEN, 0.0)


def test_a_share_with_a_promise_is_not_unlinked_before_the_promise_goes(recorded: Any) -> None:
    agreement = recorded.agreement
    with pytest.raises(ValidationFailed) as caught:
        agreement_svc.agreement_update(
            actor=recorded.admin,
            agreement=agreement,
            version=agreement.version,
            shares=[recorded.beta.pk],  # alpha goes, its promise stays: refused
        )
    assert "shares" in caught.value.errors
    kept = [p for p in promise_svc.active_promises(agreement) if p["share"] != recorded.alpha.pk]
    updated = agreement_svc.agreement_update(
        actor=recorded.admin,
        agreement=agreement,
        version=agreement.version,
        shares=[recorded.beta.pk],
        promises=kept,
    )
    assert updated.version == 2
    assert list(updated.shares.values_list("pk", flat=True)) == [recorded.beta.pk]
