"""The live scheduler honours interruption classes and constrained fallback
(docs/scheduling.md#interruption-classes, #deadline-and-budget): the job service stores
and checks the fields, the bridge hands them to the engine, deadline timeouts are
time-driven events of the cycle with their reason on the job's timeline and audit, and
the history export carries the fields so a replay keeps them."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from governance.models import AuditEntry, AuditEvent, InstanceType, Job, JobEvent, JobState
from governance.services import jobs as jobs_svc
from governance.services.errors import ValidationFailed
from scheduler import history, readings
from scheduler.cycle.run import run_cycle
from scheduler.simulate import run
from tests.factories import TeamFactory, make_admin, make_job, make_lead, make_queue, make_share
from tests.services.test_bridge import _clock_pace, at  # noqa: F401  (the fleet at clock pace)

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"


@pytest.fixture
def lab() -> Any:
    """One p4d and four g5 in one queue; share ``vision`` owns them all (RESERVE)."""
    from types import SimpleNamespace

    queue = make_queue("lab", {P4: 1, G5: 4})
    team = TeamFactory(name="vision-team")
    share = make_share(queue, team, "vision", {P4: 1, G5: 4})
    return SimpleNamespace(
        queue=queue, share=share, lead=make_lead(team, "vision_lead"), admin=make_admin("root")
    )


def _story(w: Any) -> tuple[Job, Job]:
    """p4d is busy until 600 and the four g5 until 900. ``report`` (deadline +3500 s)
    prefers one p4d (expected 3000 s there) over four g5 (1500 s): the p4d can meet
    the deadline only if it starts by 500, the g5 by 2000. ``late`` (deadline +2000 s,
    same list) can reach the p4d never and the g5 only until 500."""
    make_job(
        w.share,
        w.lead,
        name="p4d-busy",
        priority=9,
        submitted_at=at(0),
        preferences=[{"instance_type": P4, "count": 1}],
        duration=600,
    )
    make_job(
        w.share,
        w.lead,
        name="g5-busy",
        priority=9,
        submitted_at=at(0),
        preferences=[{"instance_type": G5, "count": 4}],
        duration=900,
    )
    prefs = [
        {"instance_type": P4, "count": 1, "runtime": 3000},
        {"instance_type": G5, "count": 4, "runtime": 1500},
    ]
    report = make_job(
        w.share,
        w.lead,
        name="report",
        priority=5,
        submitted_at=at(0),
        preferences=prefs,
        deadline=at(3500),
    )
    late = make_job(
        w.share,
        w.lead,
        name="late",
        priority=5,
        submitted_at=at(0),
        preferences=prefs,
        deadline=at(2000),
    )
    return report, late


def test_a_busy_first_choice_runs_out_of_time_and_the_job_starts_on_its_second(
    lab: Any, monkeypatch: Any
) -> None:
    report, late = _story(lab)
    monkeypatch.setattr("scheduler.readings.timezone.now", lambda: at(0))
    result = run_cycle(lab.queue.pk, now=at(0))
    assert result.admitted == 2
    # the next time-driven event is late's timeout at 500.001 (2000 s - 1500 s + 1 ms:
    # the engine counts in milliseconds), before any completion
    assert result.next_event_in == pytest.approx(500.001)
    explained = readings.explain_queue(lab.queue.pk)[0][report.pk]
    assert [r["reason"] for r in explained] == ["own_quota_full", "own_quota_full"]

    result = run_cycle(lab.queue.pk, now=at(500.001))
    assert result.timed_out == 1
    late.refresh_from_db()
    assert (late.state, late.finished_at) == (JobState.TIMED_OUT, at(500.001))
    event = JobEvent.objects.get(job=late, type="timed_out")
    assert event.data["reason"] == "deadline" and "deadline" in event.message
    [entry] = AuditEntry.objects.filter(event_type=AuditEvent.JOB_TIMED_OUT, job_id=late.pk)
    assert entry.after["reason"] == "deadline"

    # at 600 the p4d frees, but report can no longer finish there in time: it waits
    run_cycle(lab.queue.pk, now=at(600))
    report.refresh_from_db()
    assert report.state == JobState.PENDING
    # at 900 the g5 free: it starts on its second choice
    run_cycle(lab.queue.pk, now=at(900))
    report.refresh_from_db()
    assert (report.state, report.preference, report.instance_type.name) == (
        JobState.RUNNING,
        1,
        G5,
    )


def test_the_reasons_say_which_choice_is_out_of_reach(lab: Any, monkeypatch: Any) -> None:
    report, _ = _story(lab)
    run_cycle(lab.queue.pk, now=at(0))
    run_cycle(lab.queue.pk, now=at(500.001))
    monkeypatch.setattr("scheduler.readings.timezone.now", lambda: at(550))
    reasons = readings.explain_queue(lab.queue.pk)[0][report.pk]
    assert [r["reason"] for r in reasons] == ["deadline_unreachable", "own_quota_full"]
    assert "after the job's deadline" in reasons[0]["message"]


def test_a_job_over_budget_on_its_first_choice_runs_on_the_next(lab: Any) -> None:
    InstanceType.objects.filter(name=P4).update(hourly_price=Decimal("40"), speed=2)
    InstanceType.objects.filter(name=G5).update(hourly_price=Decimal("1.41"))
    # an hour of work: 30 min on the p4d = 20.00; an hour on 2 g5 = 2.82
    job = jobs_svc.job_submit(
        actor=lab.lead,
        share=lab.share,
        name="tune",
        preferences=[{"instance_type": P4, "count": 1}, {"instance_type": G5, "count": 2}],
        duration=3600,
        max_cost=Decimal("10"),
    )
    run_cycle(lab.queue.pk, now=timezone_now())
    job.refresh_from_db()
    assert (job.state, job.preference) == (JobState.RUNNING, 1)


def timezone_now() -> datetime:
    from django.utils import timezone

    return timezone.now()


def test_the_service_refuses_a_job_over_budget_everywhere(lab: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        jobs_svc.job_submit(
            actor=lab.lead,
            share=lab.share,
            name="tune",
            preferences=[{"instance_type": G5, "count": 1, "runtime": 3600}],
            max_cost=Decimal("1.40"),
        )
    assert list(caught.value.errors) == ["max_cost"]
    assert not Job.objects.exists()


def test_a_job_that_may_not_borrow_waits_beside_lent_capacity() -> None:
    queue = make_queue("q", {G5: 2})
    lender_team, team = TeamFactory(name="lender"), TeamFactory(name="borrower")
    make_share(queue, lender_team, "lender", {G5: 1}, policy="LEND")
    share = make_share(queue, team, "b", {G5: 1}, policy="LEND_AND_BORROW")
    lead = make_lead(team, "b_lead")
    first = make_job(share, lead, name="first", submitted_at=at(0))
    careful = make_job(share, lead, name="careful", submitted_at=at(0), may_borrow=False)
    bold = make_job(share, lead, name="bold", submitted_at=at(1))
    run_cycle(queue.pk, now=at(1))
    for job in (first, careful, bold):
        job.refresh_from_db()
    assert (first.state, careful.state, bold.state) == (
        JobState.RUNNING,
        JobState.PENDING,
        JobState.RUNNING,
    )
    assert bold.borrowed == 1


def test_a_job_that_is_not_preemptible_is_no_in_share_victim() -> None:
    queue = make_queue("q", {G5: 1})
    team = TeamFactory(name="t")
    share = make_share(queue, team, "s", {G5: 1}, in_share_preemption=True)
    lead = make_lead(team, "t_lead")
    release = make_job(
        share,
        lead,
        name="release",
        priority=1,
        submitted_at=at(0),
        preemptible=False,
        duration=1000,
    )
    run_cycle(queue.pk, now=at(0))
    urgent = make_job(share, lead, name="urgent", priority=9, submitted_at=at(10))
    result = run_cycle(queue.pk, now=at(10))
    assert result.preempted == 0
    release.refresh_from_db()
    urgent.refresh_from_db()
    assert (release.state, urgent.state) == (JobState.RUNNING, JobState.PENDING)


def test_the_history_export_keeps_the_fields_and_replays_the_timeout(lab: Any) -> None:
    report, late = _story(lab)
    for second in (0, 500.001, 600, 900):
        run_cycle(lab.queue.pk, now=at(second))
    out = history.export(lab.queue, at(-1), at(1000), now=at(1000))
    scenario = out["scenario"]
    jobs = {j["id"]: j for j in scenario["jobs"]}
    exported = jobs[str(late.pk)]
    assert exported["deadline"] == 2001 * 1000  # window starts at -1 s, in ms
    assert exported["preferences"][0]["runtime"] == 3_000_000
    replay = run(scenario)
    timed_out = [e for e in replay["events"] if e["type"] == "timed_out"]
    assert timed_out == [
        {"at": 501_001, "type": "timed_out", "job": str(late.pk), "reason": "deadline"}
    ]
    assert replay["events"] == out["recorded"]["events"]
    assert replay["jobs"] == out["recorded"]["jobs"]
    assert replay["jobs"][str(report.pk)]["preference"] == 1


def test_the_share_preview_skips_jobs_not_preemptible_and_never_borrows_for_careful_ones(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr("scheduler.readings.timezone.now", lambda: at(10))
    queue = make_queue("q", {G5: 3})
    lender_team, team = TeamFactory(name="lender"), TeamFactory(name="t")
    make_share(queue, lender_team, "lender", {G5: 2}, policy="LEND")
    share = make_share(queue, team, "s", {G5: 1}, policy="LEND")
    lead = make_lead(team, "t_lead")
    release = make_job(
        share, lead, name="release", priority=1, submitted_at=at(0), preemptible=False
    )
    run_cycle(queue.pk, now=at(0))
    make_job(share, lead, name="urgent", priority=9, submitted_at=at(5))
    careful = make_job(
        share, lead, name="careful", priority=5, submitted_at=at(5), may_borrow=False
    )
    # in-share preemption on: urgent may not stop release, which is not preemptible
    preview = readings.preview_share_change(share, {"in_share_preemption": True})
    assert preview["preempted"] == [] and preview["started"] == []
    Job.objects.filter(pk=release.pk).update(preemptible=True)
    preview = readings.preview_share_change(share, {"in_share_preemption": True})
    assert [(row["name"], row["rule"]) for row in preview["preempted"]] == [("release", "priority")]
    Job.objects.filter(pk=release.pk).update(preemptible=False)
    # borrowing allowed: urgent starts by borrowing, careful does not
    preview = readings.preview_share_change(
        share, {"policy": "LEND_AND_BORROW", "borrow_limit": -1}
    )
    assert [(row["name"], row["rule"]) for row in preview["started"]] == [("urgent", "borrow")]
    assert careful.pk not in {row["job"] for row in preview["started"]}


def test_a_job_that_may_not_borrow_beyond_its_limit_can_never_start() -> None:
    from governance.selectors import scheduling

    queue = make_queue("q", {G5: 3})
    team = TeamFactory(name="t")
    share = make_share(queue, team, "s", {G5: 1}, policy="LEND_AND_BORROW", borrow_limit=-1)
    lead = make_lead(team, "t_lead")
    careful = make_job(
        share,
        lead,
        name="careful",
        preferences=[{"instance_type": G5, "count": 2}],
        may_borrow=False,
    )
    bold = make_job(share, lead, name="bold", preferences=[{"instance_type": G5, "count": 2}])
    blockers = scheduling.never_starting([careful, bold])
    assert list(blockers) == [careful.pk]
    assert blockers[careful.pk][0]["most"] == 1
