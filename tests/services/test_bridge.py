"""The live scheduler's bridge: engine decisions applied to the database through services.

Each test calls ``run_cycle`` with explicit ``now`` datetimes; with
``DEMO_TIME_FACTOR=1`` the simulated fleet runs at the clock's pace, so work equals
elapsed seconds and the figures match the worked examples of docs/scheduling.md.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from governance.models import AuditEntry, AuditEvent, Job, JobEvent, JobState
from governance.services import capacity as capacity_svc
from governance.services import jobs as jobs_svc
from governance.services import shares as shares_svc
from scheduler import readings
from scheduler.cycle import kept, read
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, make_admin, make_job, make_lead, make_queue, make_share

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
T0 = datetime(2025, 1, 6, 9, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def _clock_pace(settings: Any) -> None:
    settings.DEMO_TIME_FACTOR = 1


def audits(event: AuditEvent, job: Job) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(event_type=event, job_id=job.pk).order_by("id"))


def events(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("id").values_list("type", flat=True))


def refresh(*jobs: Job) -> None:
    for job in jobs:
        job.refresh_from_db()


# --------------------------------------------------------------- the AWS worked example


@pytest.fixture
def aws() -> Any:
    """The worked example of docs/scheduling.md: three shares of one queue of 3 x ml.g5.xlarge."""
    from types import SimpleNamespace

    queue = make_queue("sagemaker-training", {G5: 3})
    teams = {name: TeamFactory(name=name) for name in ("bg-team", "med-team", "prot-team")}
    background = make_share(
        queue,
        teams["bg-team"],
        "background",
        {G5: 1},
        policy="LEND_AND_BORROW",
        borrow_limit=200,
        in_share_preemption=True,
    )
    medium = make_share(queue, teams["med-team"], "medium", {G5: 1}, policy="LEND")
    protected = make_share(queue, teams["prot-team"], "protected", {G5: 1}, policy="RESERVE")
    bg_lead = make_lead(teams["bg-team"], "bg_lead")
    med_lead = make_lead(teams["med-team"], "med_lead")
    jobs = {
        name: make_job(
            background, bg_lead, name=name, priority=priority, duration=3600, submitted_at=T0
        )
        for name, priority in (("bg-high", 3), ("bg-med", 2), ("bg-low", 1))
    }
    return SimpleNamespace(
        queue=queue,
        background=background,
        medium=medium,
        protected=protected,
        bg_lead=bg_lead,
        med_lead=med_lead,
        jobs=jobs,
    )


def test_aws_worked_example_step_by_step(aws: Any) -> None:
    high, med, low = aws.jobs["bg-high"], aws.jobs["bg-med"], aws.jobs["bg-low"]

    # t0: bg-high within background's own limit, bg-med borrowing medium's idle instance;
    # protected's idle instance stays reserved, so bg-low waits.
    result = run_cycle(aws.queue.pk, now=at(0))
    assert (result.admitted, result.preempted) == (2, 0)
    refresh(high, med, low)
    assert (high.state, high.borrowed, high.started_at) == (JobState.RUNNING, 0, at(0))
    assert (med.state, med.borrowed) == (JobState.RUNNING, 1)
    assert low.state == JobState.PENDING
    [admit_high] = audits(AuditEvent.JOB_ADMITTED, high)
    assert admit_high.actor_id is None
    assert admit_high.after["rule"] == "own"
    assert admit_high.after["share_versions"] == {"background": aws.background.version}
    assert admit_high.after["instance_type"] == G5 and admit_high.after["run"] == 1
    assert (admit_high.share_id, admit_high.team_id, admit_high.queue_id) == (
        aws.background.pk,
        aws.background.team_id,
        aws.queue.pk,
    )
    assert admit_high.before["state"] == JobState.PENDING
    assert admit_high.created_at == at(0)
    [admit_med] = audits(AuditEvent.JOB_ADMITTED, med)
    assert admit_med.after["rule"] == "borrow" and admit_med.after["borrowed"] == 1
    assert "borrowing 1" in admit_med.reason
    assert events(high) == ["admitted"] and events(med) == ["admitted"]
    # Why bg-low waits, as the engine sees the queue at t0 (protected's idle is reserved).
    loaded = read.load(aws.queue, at(0), lock=False)
    assert [r.reason for r in loaded.engine.explain(str(low.pk))] == ["no_lendable_capacity"]

    # t0+60: med-1 of medium reclaims its lent instance from bg-med (60 s of work lost).
    med1 = make_job(
        aws.medium, aws.med_lead, name="med-1", priority=1, duration=3600, submitted_at=at(60)
    )
    result = run_cycle(aws.queue.pk, now=at(60))
    assert (result.admitted, result.preempted) == (1, 1)
    refresh(high, med, low, med1)
    assert (med.state, med.preemptions, med.counted_preemptions) == (JobState.PENDING, 1, 1)
    assert med.recomputed == pytest.approx(60)
    assert (med1.state, med1.borrowed) == (JobState.RUNNING, 0)
    assert high.state == JobState.RUNNING and low.state == JobState.PENDING
    [reclaim] = audits(AuditEvent.JOB_PREEMPTED, med)
    assert reclaim.after["rule"] == "reclaim"
    assert reclaim.after["by_job"] == med1.pk and reclaim.after["by_share"] == "medium"
    assert reclaim.after["lost_work"] == pytest.approx(60)
    assert reclaim.after["share_versions"] == {
        "background": aws.background.version,
        "medium": aws.medium.version,
    }
    assert reclaim.created_at == at(60)
    assert "took back" in reclaim.reason
    assert audits(AuditEvent.JOB_ADMITTED, med1)[0].after["rule"] == "own"
    assert events(med) == ["admitted", "preempted"]
    preempted_event = JobEvent.objects.get(job=med, type="preempted")
    assert preempted_event.data["reason"] == "reclaim" and preempted_event.data["by"] == med1.pk
    # The victim's "preempted" comes before its preemptor's "admitted".
    assert reclaim.pk < audits(AuditEvent.JOB_ADMITTED, med1)[0].pk

    # t0+120: bg-low raised to 4 through the service preempts bg-high in-share (120 lost).
    jobs_svc.job_reprioritise(actor=aws.bg_lead, job=low, priority=4, reason="release blocked")
    result = run_cycle(aws.queue.pk, now=at(120))
    assert (result.admitted, result.preempted) == (1, 1)
    refresh(high, med, low, med1)
    assert (high.state, high.preemptions, high.recomputed) == (JobState.PENDING, 1, 120)
    assert (low.state, low.started_at, low.borrowed) == (JobState.RUNNING, at(120), 0)
    assert med1.state == JobState.RUNNING and med.state == JobState.PENDING
    [by_priority] = audits(AuditEvent.JOB_PREEMPTED, high)
    assert by_priority.after["rule"] == "priority"
    assert by_priority.after["by_job"] == low.pk
    assert by_priority.after["lost_work"] == pytest.approx(120)
    assert by_priority.after["share_versions"] == {"background": aws.background.version}
    assert "higher priority (4 > 3)" in by_priority.reason
    assert events(low) == ["reprioritised", "admitted"]

    # Nothing more happens at the same instant.
    again = run_cycle(aws.queue.pk, now=at(120))
    assert (again.admitted, again.preempted, again.completed) == (0, 0, 0)


def test_audit_entries_match_the_engine_replay_of_the_worked_example() -> None:
    """The same decisions, in the same order, as ``scheduler.simulate`` on the product's
    worked example (``examples/scenarios/worked_example.json``, walked through in
    docs/scheduling.md): the story is told once more through the database, the services
    and the bridge, one cycle at each instant where something is submitted or changed."""
    import json

    from scheduler import simulate
    from tests.engine.helpers import EXAMPLES

    scenario = json.loads((EXAMPLES / "worked_example.json").read_text())
    actions = scenario.get("actions", [])
    assert {a["type"] for a in actions} <= {"set_priority"}, "only priority changes replayed"
    expected = [
        (e["at"], e["type"], e["job"])
        for e in simulate.run(scenario)["events"]
        if e["type"] in ("admitted", "preempted")
    ]
    assert any(kind == "preempted" for _, kind, _ in expected)

    queue = make_queue(
        "worked-example", {t["name"]: t["capacity"] for t in scenario["instance_types"]}
    )
    shares, leads = {}, {}
    for spec in scenario["shares"]:
        team = TeamFactory(name=f"{spec['name']}-team")
        shares[spec["name"]] = make_share(
            queue,
            team,
            spec["name"],
            spec["limits"],
            policy=spec.get("policy", "RESERVE"),
            borrow_limit=spec.get("borrow_limit", -1),
            in_share_preemption=spec.get("in_share_preemption", False),
        )
        leads[spec["name"]] = make_lead(team, f"{spec['name']}_lead")
    specs = {job["id"]: job for job in scenario["jobs"]}
    jobs: dict[str, Job] = {}
    for now in sorted({j["submit_at"] for j in specs.values()} | {a["at"] for a in actions}):
        for action in (a for a in actions if a["at"] == now):
            job = jobs[action["job"]]
            lead = leads[specs[action["job"]]["share"]]
            jobs_svc.job_reprioritise(actor=lead, job=job, priority=action["priority"])
        for spec in (j for j in specs.values() if j["submit_at"] == now):
            jobs[spec["id"]] = make_job(
                shares[spec["share"]],
                leads[spec["share"]],
                name=spec["id"],
                priority=spec["priority"],
                preferences=spec["preferences"],
                duration=spec["duration"],
                submitted_at=at(now),
            )
        run_cycle(queue.pk, now=at(now))
    assert max(e[0] for e in expected) <= now < scenario["until"]

    names = {job.pk: name for name, job in jobs.items()}
    kinds = {AuditEvent.JOB_ADMITTED: "admitted", AuditEvent.JOB_PREEMPTED: "preempted"}
    got = [
        (round((e.created_at - T0).total_seconds()), kinds[e.event_type], names[e.job_id])
        for e in AuditEntry.objects.filter(event_type__in=list(kinds)).order_by("id")
    ]
    assert got == expected


# --------------------------------------------------------------- preemption edge rules


@pytest.fixture
def one_share() -> Any:
    """One queue of 2 x ml.g5.xlarge, one share owning both, in-share preemption on."""
    from types import SimpleNamespace

    queue = make_queue("q", {G5: 2})
    team = TeamFactory(name="t")
    share = make_share(queue, team, "s", {G5: 2}, in_share_preemption=True)
    return SimpleNamespace(
        queue=queue, share=share, lead=make_lead(team, "t_lead"), admin=make_admin("root")
    )


def test_capacity_drop_stops_jobs_as_capacity_lost_without_counting_retries(
    one_share: Any,
) -> None:
    w = one_share
    w.share.preemption_retries = 0
    w.share.save()
    a = make_job(w.share, w.lead, name="a", priority=5, submitted_at=at(0), duration=1000)
    b = make_job(w.share, w.lead, name="b", priority=1, submitted_at=at(0), duration=1000)
    run_cycle(w.queue.pk, now=at(0))
    capacity_svc.queue_set_capacity(actor=w.admin, queue=w.queue, capacity={G5: 1})
    result = run_cycle(w.queue.pk, now=at(30))
    assert result.preempted == 1
    refresh(a, b)
    # The lower-priority job goes; retries 0 does not fail it: it yielded to no one.
    assert a.state == JobState.RUNNING
    assert (b.state, b.preemptions, b.counted_preemptions) == (JobState.PENDING, 1, 0)
    assert b.recomputed == pytest.approx(30)
    [entry] = audits(AuditEvent.JOB_PREEMPTED, b)
    assert entry.after["rule"] == "capacity_lost" and entry.after["by_job"] is None
    assert "capacity dropped to 1" in entry.reason
    assert JobEvent.objects.get(job=b, type="preempted").data["counted"] is False
    assert not audits(AuditEvent.JOB_FAILED, b)


def test_zero_retries_fails_a_job_at_its_first_preemption(one_share: Any) -> None:
    w = one_share
    w.share.preemption_retries = 0
    w.share.save()
    low = make_job(
        w.share,
        w.lead,
        name="low",
        priority=1,
        submitted_at=at(0),
        count=2,
        preferences=[{"instance_type": G5, "count": 2}],
    )
    run_cycle(w.queue.pk, now=at(0))
    high = make_job(w.share, w.lead, name="high", priority=9, submitted_at=at(10))
    run_cycle(w.queue.pk, now=at(10))
    refresh(low, high)
    assert (low.state, low.finished_at, low.preemptions) == (JobState.FAILED, at(10), 1)
    assert high.state == JobState.RUNNING
    assert audits(AuditEvent.JOB_PREEMPTED, low)[0].after["rule"] == "priority"
    [failed] = audits(AuditEvent.JOB_FAILED, low)
    assert failed.after["rule"] == "preemption_retries_exhausted"
    assert events(low) == ["admitted", "preempted", "failed"]
    # A failed job never comes back.
    run_cycle(w.queue.pk, now=at(20))
    refresh(low)
    assert low.state == JobState.FAILED and low.run == 1


def test_max_pending_time_times_a_job_out(one_share: Any) -> None:
    w = one_share
    hog = make_job(
        w.share,
        w.lead,
        name="hog",
        priority=9,
        submitted_at=at(0),
        count=2,
        preferences=[{"instance_type": G5, "count": 2}],
        duration=1000,
    )
    waiter = make_job(
        w.share, w.lead, name="waiter", priority=1, submitted_at=at(0), max_pending=30
    )
    result = run_cycle(w.queue.pk, now=at(0))
    assert result.next_event_in == pytest.approx(30)
    run_cycle(w.queue.pk, now=at(29))
    waiter.refresh_from_db()
    assert waiter.state == JobState.PENDING
    result = run_cycle(w.queue.pk, now=at(30))
    assert result.timed_out == 1
    refresh(waiter, hog)
    assert (waiter.state, waiter.finished_at) == (JobState.TIMED_OUT, at(30))
    [entry] = audits(AuditEvent.JOB_TIMED_OUT, waiter)
    assert entry.after["rule"] == "timeout" and entry.after["max_pending"] == 30
    assert events(waiter) == ["timed_out"]
    assert hog.state == JobState.RUNNING


def test_simulated_completion_frees_capacity_and_the_next_job_starts(one_share: Any) -> None:
    w = one_share
    first = make_job(
        w.share,
        w.lead,
        name="first",
        priority=5,
        submitted_at=at(0),
        count=2,
        preferences=[{"instance_type": G5, "count": 2}],
        duration=100,
    )
    second = make_job(
        w.share,
        w.lead,
        name="second",
        priority=1,
        submitted_at=at(0),
        count=2,
        preferences=[{"instance_type": G5, "count": 2}],
        duration=50,
    )
    result = run_cycle(w.queue.pk, now=at(0))
    assert result.admitted == 1 and result.next_event_in == pytest.approx(100)
    run_cycle(w.queue.pk, now=at(99))
    refresh(first, second)
    assert first.state == JobState.RUNNING and second.state == JobState.PENDING
    result = run_cycle(w.queue.pk, now=at(100.5))
    assert (result.completed, result.admitted) == (1, 1)
    refresh(first, second)
    # Completed at its finishing moment, not when the cycle noticed.
    assert (first.state, first.finished_at, first.work_done) == (JobState.SUCCEEDED, at(100), 100)
    assert second.state == JobState.RUNNING and second.started_at == at(100.5)
    assert audits(AuditEvent.JOB_COMPLETED, first)[0].created_at == at(100)
    assert events(first) == ["admitted", "completed"]


def test_simulated_completion_at_demo_speed(one_share: Any, settings: Any) -> None:
    """With DEMO_TIME_FACTOR 60, a 600 s job finishes after 10 real seconds."""
    settings.DEMO_TIME_FACTOR = 60
    w = one_share
    job = make_job(w.share, w.lead, name="j", submitted_at=at(0), duration=600)
    result = run_cycle(w.queue.pk, now=at(0))
    assert result.next_event_in == pytest.approx(10)
    run_cycle(w.queue.pk, now=at(10))
    job.refresh_from_db()
    assert (job.state, job.finished_at) == (JobState.SUCCEEDED, at(10))


def test_checkpoints_of_the_simulated_fleet_limit_lost_work(one_share: Any) -> None:
    w = one_share
    low = make_job(
        w.share,
        w.lead,
        name="low",
        priority=1,
        submitted_at=at(0),
        count=2,
        preferences=[{"instance_type": G5, "count": 2}],
        duration=1000,
        checkpoint_interval=50,
    )
    run_cycle(w.queue.pk, now=at(0))
    make_job(w.share, w.lead, name="high", priority=9, submitted_at=at(120))
    run_cycle(w.queue.pk, now=at(120))
    low.refresh_from_db()
    assert low.state == JobState.PENDING
    assert (low.work_done, low.checkpoint_work, low.recomputed) == (100, 100, 20)


def test_a_cycle_run_twice_applies_nothing_the_second_time(aws: Any) -> None:
    first = run_cycle(aws.queue.pk, now=at(0))
    assert first.admitted == 2
    audit_count = AuditEntry.objects.count()
    event_count = JobEvent.objects.count()
    states = dict(Job.objects.values_list("id", "run"))
    second = run_cycle(aws.queue.pk, now=at(0))
    third = run_cycle(aws.queue.pk, now=at(5))
    for result in (second, third):
        assert (result.admitted, result.preempted, result.completed, result.timed_out) == (
            0,
            0,
            0,
            0,
        )
    assert AuditEntry.objects.count() == audit_count
    assert JobEvent.objects.count() == event_count
    assert dict(Job.objects.values_list("id", "run")) == states


def test_lowering_a_limit_stops_nothing_but_opens_the_usage_to_reclaim() -> None:
    queue = make_queue("q", {G5: 2})
    owner_team, user_team = TeamFactory(name="owner"), TeamFactory(name="user")
    owner = make_share(queue, owner_team, "owner", {G5: 1}, policy="LEND")
    user = make_share(queue, user_team, "user", {G5: 2}, policy="RESERVE")
    admin = make_admin("root")
    user_lead, owner_lead = make_lead(user_team, "u_lead"), make_lead(owner_team, "o_lead")
    running = [
        # No duration: usage() reads the state at the wall clock, long after T0.
        make_job(user, user_lead, name=f"u{i}", priority=i, submitted_at=at(0))
        for i in range(2)
    ]
    run_cycle(queue.pk, now=at(0))
    assert Job.objects.filter(state=JobState.RUNNING).count() == 2

    updated = shares_svc.share_update(
        actor=admin, share=user, version=user.version, changes={"limits": {G5: 1}}, reason="cut"
    )
    assert updated.version == user.version + 1
    result = run_cycle(queue.pk, now=at(10))
    assert (result.admitted, result.preempted) == (0, 0)
    assert Job.objects.filter(state=JobState.RUNNING).count() == 2
    row = next(r for r in readings.usage(queue.pk) if r["share_name"] == "user")
    assert (row["limit"], row["usage"], row["borrowed"]) == (1, 2, 1)

    claim = make_job(owner, owner_lead, name="claim", priority=0, submitted_at=at(20))
    result = run_cycle(queue.pk, now=at(20))
    assert (result.admitted, result.preempted) == (1, 1)
    refresh(claim, *running)
    assert claim.state == JobState.RUNNING
    # The lower-priority one of the user's jobs yields (priority first in victim order).
    assert running[0].state == JobState.PENDING and running[1].state == JobState.RUNNING
    [entry] = audits(AuditEvent.JOB_PREEMPTED, running[0])
    assert entry.after["rule"] == "reclaim"
    assert entry.after["share_versions"] == {"user": updated.version, "owner": owner.version}


def test_a_cycle_completing_simulated_runs_asks_for_no_further_cycle(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The cycle decides on its own completions: requesting another would find nothing."""
    queue = make_queue("turnover", {G5: 1})
    team = TeamFactory(name="turnover-team")
    share = make_share(queue, team, "turnover", {G5: 1})
    lead = make_lead(team)
    first = make_job(share, lead, name="first", duration=10, submitted_at=at(0))
    second = make_job(share, lead, name="second", duration=10, submitted_at=at(1))
    run_cycle(queue.pk, now=at(2))
    with django_capture_on_commit_callbacks() as callbacks:
        result = run_cycle(queue.pk, now=at(20))
    assert (result.completed, result.admitted) == (1, 1)
    refresh(first, second)
    assert (first.state, second.state) == (JobState.SUCCEEDED, JobState.RUNNING)
    # nothing runs after the commit but the worker keeping the queue's engine
    assert [getattr(c, "func", c) for c in callbacks] == [kept.keep]
