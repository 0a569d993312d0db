"""The demo loads through the services, once, and shows every exception state."""

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from governance import demo
from governance.models import AuditEntry, ExceptionState, JobQueue, PriorityException, Share


@pytest.mark.django_db
def test_demo_loads_once_with_every_exception_state(tmp_path: Path) -> None:
    logins = demo.load(tmp_path)
    assert demo.already_loaded()
    assert (tmp_path / "demo_logins.txt").read_text().splitlines() == logins
    aws = JobQueue.objects.get(name="aws-worked-example")
    policies = dict(Share.objects.filter(queue=aws).values_list("name", "policy"))
    assert policies == {"background": "LEND_AND_BORROW", "medium": "LEND", "protected": "RESERVE"}
    assert Share.objects.get(queue=aws, name="background").borrow_limit == 200
    states = set(PriorityException.objects.values_list("state", flat=True))
    assert states == set(ExceptionState.values)
    # The trail is history: nothing in it is dated after the load.
    assert not AuditEntry.objects.filter(created_at__gt=timezone.now()).exists()
    # Every write went through a service, so every created object has its audit entry.
    assert AuditEntry.objects.filter(event_type="share.created").count() == Share.objects.count()


@pytest.mark.django_db
def test_demo_plan_is_active_and_named_first_by_training_jobs(tmp_path: Path) -> None:
    """The demo's plan: vision's, on the fleet's most contended type, active now; vision's
    training jobs name it first, and the scheduler starts them on it."""
    from governance.models import CapacityPlan, Job, JobState, PlanState, ShareLimit
    from scheduler.cycle.run import run_cycle

    demo.load(tmp_path)
    plan = CapacityPlan.objects.get(name=demo.DEMO_PLAN)
    assert plan.state_at(timezone.now()) is PlanState.ACTIVE
    assert plan.share.team.name == "vision"
    # Most contended in the fleet: the shares' limits on it add up to its whole capacity.
    fleet = plan.queue
    capacity = fleet.capacities.get(instance_type=plan.instance_type).count
    limits = sum(
        ShareLimit.objects.filter(share__queue=fleet, instance_type=plan.instance_type).values_list(
            "count", flat=True
        )
    )
    assert limits >= capacity
    first = [j for j in Job.objects.filter(share=plan.share) if j.preferences[0].get("plan")]
    assert {j.kind for j in first} == {"training"}
    assert len(first) >= 2
    run_cycle(fleet.pk)
    on_plan = Job.objects.filter(plan=plan, state=JobState.RUNNING)
    assert on_plan.exists()


@pytest.mark.django_db
def test_demo_history_is_played_written_once_and_replays(tmp_path: Path, settings) -> None:
    from datetime import timedelta

    from governance.demo import history as demo_history
    from governance.models import Job, JobEvent
    from governance.selectors import scheduling

    settings.DEMO_TIME_FACTOR = 60
    demo.load(tmp_path)
    now = timezone.now()
    written = demo_history.load_history(now=now, days=1)
    assert written == demo_history.JOBS_PER_DAY
    assert demo_history.load_history(now=now, days=1) == 0  # once
    history = Job.objects.filter(name__startswith="history-")
    assert history.count() == written
    assert not history.filter(state__in=["PENDING", "RUNNING"]).exists()  # all in the past
    assert not history.filter(finished_at__gt=now).exists()
    kinds = set(JobEvent.objects.filter(job__in=history).values_list("type", flat=True))
    assert {"admitted", "completed"} <= kinds
    assert AuditEntry.objects.filter(event_type="job.admitted", job__in=history).exists()
    # The history export of the fleet replays it: the jobs' work is the fleet's
    fleet = JobQueue.objects.get(name="gpu-fleet")
    first = history.order_by("submitted_at").first()
    assert first is not None
    start = first.submitted_at - timedelta(seconds=1)
    exported = scheduling.queue_history(fleet, start, now)
    assert history.filter(state="SUCCEEDED").count() > written * 0.9
    replayed = scheduling.replay(exported["scenario"])["events"]
    history_ids = {str(pk) for pk in history.values_list("pk", flat=True)}
    recorded = [e for e in exported["recorded"]["events"] if e["job"] in history_ids]
    assert [e for e in replayed if e["job"] in history_ids] == recorded


@pytest.mark.django_db
def test_the_demo_acts_under_its_own_actor_who_cannot_sign_in(tmp_path: Path) -> None:
    """Issue 13: the seed is recorded under "demo", not the people it signs in as; only
    filing an exception or a share change request stays with a team's lead (no one
    else may file one)."""
    demo.load(tmp_path)
    actor = get_user_model().objects.get(username=demo.DEMO_ACTOR)
    assert not actor.is_active and not actor.has_usable_password()
    client = Client()
    answer = client.post("/login/", {"username": demo.DEMO_ACTOR, "password": demo.DEMO_ACTOR})
    assert answer.status_code != 302 and "_auth_user_id" not in client.session
    by_people = AuditEntry.objects.exclude(actor=None).exclude(actor=actor)
    # A configuration's proposer may not certify it: a lead proposes the demo's.
    assert set(by_people.values_list("event_type", flat=True)) == {
        "exception.filed",
        "change_request.filed",
        "certification.proposed",
    }
    assert set(by_people.values_list("actor__username", flat=True)) <= {
        f"lead-{team}" for team in demo.TEAMS
    }
    assert AuditEntry.objects.filter(actor=actor, event_type="share.created").exists()


@pytest.mark.django_db
def test_demo_has_a_lender_two_teams_borrow_from_and_a_pending_change_request(
    tmp_path: Path,
) -> None:
    from governance.models import ChangeRequestState, ShareChangeRequest
    from scheduler import readings
    from scheduler.cycle.run import run_cycle

    demo.load(tmp_path)
    pool = JobQueue.objects.get(name=demo.LENDING_QUEUE)
    run_cycle(pool.pk)
    lender = Share.objects.get(queue=pool, name="speech-serving")
    lent = readings.lending_now(lender)["lent"]
    borrowers = {(row["borrower_name"], row["instances"]) for row in lent}
    assert borrowers == {("vision-batch", 1), ("language-eval", 2)}
    assert {row["runs"][0]["team"] for row in lent} == {"vision", "language"}  # two teams
    (pending,) = ShareChangeRequest.objects.filter(state=ChangeRequestState.PENDING)
    assert pending.requester.username == "lead-language"
    assert set(pending.preview) == {"preempted", "reclaimable", "started", "warnings"}


@pytest.mark.django_db
def test_the_demo_agreements_keep_one_promise_and_break_another(tmp_path: Path) -> None:
    """Judged on the demo's own played history: vision's goodput holds; speech lends its
    idle capacity and its own jobs wait longer than the hour it was promised."""
    from governance.demo import history as demo_history
    from governance.models import Notification, NotificationKind, Promise

    demo.load(tmp_path)
    assert Promise.objects.filter(state="").count() == 3  # not evaluated before the history
    demo_history.load_history_and_rollups(now=timezone.now())
    states = {
        (p.share.name, p.figure): (p.state, p.value)
        for p in Promise.objects.select_related("share")
    }
    goodput = states[("vision-training", "goodput")]
    assert goodput[0] == "kept" and goodput[1] is not None and goodput[1] >= 0.95
    wait = states[("speech-inference-eval", "wait_to_start.entitled.p90")]
    assert wait[0] == "broken" and wait[1] is not None and wait[1] > 3600
    told = Notification.objects.filter(kind=NotificationKind.PROMISE_BROKEN)
    assert "lead-speech" in {n.recipient.username for n in told}


@pytest.mark.django_db
def test_every_demo_team_has_a_verified_an_unverified_and_a_protected_workload(
    tmp_path: Path,
) -> None:
    from governance.models import Decision, RecoveryChange, Workload

    demo.load(tmp_path)
    rows = set(Workload.objects.values_list("team__name", "interruption", "recovery_status"))
    assert rows == {
        (team, interruption, status)
        for team in demo.TEAMS
        for interruption, status in (
            ("tolerant", "unverified"),
            ("protected", "unverified"),
            ("tolerant", "verified"),
        )
    }
    for change in RecoveryChange.objects.filter(after="verified"):
        evidence = change.evidence_job
        assert evidence is not None and evidence.workload_id == change.workload_id
        assert evidence.preemptions >= 1 and evidence.output_valid is True
    [decision] = Decision.objects.all()
    assert decision.state == "open" and decision.team.name == "vision"
    assert decision.job.state == "FAILED" and decision.job.workload.name == "vision/finetune"
