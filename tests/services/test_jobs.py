"""Job submission, cancellation and reprioritisation rules, through the services."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, ExceptionState, Job, JobEvent, JobState
from governance.models import PriorityException as PE
from governance.services import jobs as svc
from governance.services.errors import NotFound, PermissionDenied, ValidationFailed
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"
P4 = "ml.p4d.24xlarge"


@pytest.fixture
def w() -> Any:
    return make_world()


def submit(w: Any, actor: Any = None, **fields: Any) -> Job:
    fields.setdefault("share", w.red_share)
    fields.setdefault("name", "train")
    fields.setdefault("preferences", [{"instance_type": G5, "count": 1}])
    return svc.job_submit(actor=actor or w.red_member, **fields)


def errors_of(exc_info: Any) -> dict[str, list[str]]:
    return exc_info.value.errors


def assert_refused(w: Any, field: str, actor: Any = None, **fields: Any) -> list[str]:
    """Submission fails naming ``field`` and writes nothing."""
    with pytest.raises(ValidationFailed) as exc_info:
        submit(w, actor, **fields)
    assert field in errors_of(exc_info), errors_of(exc_info)
    assert not Job.objects.exists()
    assert not AuditEntry.objects.filter(event_type=AuditEvent.JOB_SUBMITTED).exists()
    return errors_of(exc_info)[field]


# --- submission ---------------------------------------------------------------------------


def test_submit_writes_job_event_and_audit(w: Any, django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        job = submit(
            w,
            priority=50,
            preferences=[{"instance_type": P4}, {"instance_type": G5}],
            count=1,
            max_pending=600,
            checkpoint_interval=60,
            duration=300,
            kind="processing",
            queue=w.queue.pk,
        )
    assert len(callbacks) == 1
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.queue_id == w.queue.pk
    assert job.submitter == w.red_member
    assert job.preferences == [
        {"instance_type": P4, "count": 1},
        {"instance_type": G5, "count": 1},
    ]
    assert job.count == 1
    assert (job.max_pending, job.checkpoint_interval, job.duration) == (600, 60, 300)
    event = JobEvent.objects.get(job=job)
    assert event.type == "submitted"
    assert "red_member" in event.message
    entry = AuditEntry.objects.get(event_type=AuditEvent.JOB_SUBMITTED)
    assert entry.actor == w.red_member
    assert entry.before is None
    assert entry.after["priority"] == 50
    assert entry.after["preferences"] == job.preferences
    assert entry.after["state"] == "PENDING"
    assert (entry.job_id, entry.share_id, entry.team_id, entry.queue_id) == (
        job.pk,
        w.red_share.pk,
        w.red.pk,
        w.queue.pk,
    )


def test_submit_with_counts_per_preference(w: Any) -> None:
    job = submit(
        w, preferences=[{"instance_type": G5, "count": 2}, {"instance_type": P4, "count": 1}]
    )
    assert job.count is None
    assert [p["count"] for p in job.preferences] == [2, 1]


@pytest.mark.parametrize("who", ["red_lead", "red_member", "admin"])
def test_who_may_submit(w: Any, who: str) -> None:
    assert submit(w, getattr(w, who)).pk


@pytest.mark.parametrize("who", ["blue_lead", "reviewer", "outsider"])
def test_others_may_not_submit(w: Any, who: str) -> None:
    with pytest.raises(PermissionDenied):
        submit(w, getattr(w, who))
    assert not Job.objects.exists()


def test_disabled_share_refused(w: Any) -> None:
    w.red_share.enabled = False
    w.red_share.save()
    assert "disabled" in assert_refused(w, "share")[0]


def test_unknown_share_refused(w: Any) -> None:
    assert_refused(w, "share", share=999999)


def test_queue_must_match_share(w: Any) -> None:
    from tests.factories import make_queue

    other = make_queue("other")
    assert_refused(w, "queue", queue=other.pk)


@pytest.mark.parametrize(
    "preferences",
    [[], None, "ml.g5.xlarge", [{"instance_type": G5, "count": 1}] * 6],
)
def test_preferences_one_to_five(w: Any, preferences: Any) -> None:
    assert_refused(w, "preferences", preferences=preferences)


def test_six_distinct_preferences_refused(w: Any) -> None:
    prefs = [{"instance_type": f"t{i}", "count": 1} for i in range(6)]
    messages = assert_refused(w, "preferences", preferences=prefs)
    assert any("At most 5" in m for m in messages)


def test_duplicate_types_refused(w: Any) -> None:
    messages = assert_refused(w, "preferences", preferences=[{"instance_type": G5, "count": 1}] * 2)
    assert "preferences[1]" in messages[0] and "twice" in messages[0]


def test_type_without_limit_names_type_and_share_types(w: Any) -> None:
    messages = assert_refused(w, "preferences", preferences=[{"instance_type": "ml.x", "count": 1}])
    assert "ml.x" in messages[0]
    assert G5 in messages[0] and P4 in messages[0]


def test_counts_mixed_with_common_count_refused(w: Any) -> None:
    assert_refused(w, "count", preferences=[{"instance_type": G5, "count": 1}], count=1)


def test_counts_on_some_preferences_only_refused(w: Any) -> None:
    messages = assert_refused(
        w, "preferences", preferences=[{"instance_type": G5, "count": 1}, {"instance_type": P4}]
    )
    assert "preferences[1]" in messages[0]


def test_no_count_at_all_refused(w: Any) -> None:
    assert_refused(w, "count", preferences=[{"instance_type": G5}])


@pytest.mark.parametrize("bad", [0, -1, "2", True, 1.5])
def test_preference_count_at_least_one(w: Any, bad: Any) -> None:
    messages = assert_refused(
        w,
        "preferences",
        preferences=[{"instance_type": P4, "count": 1}, {"instance_type": G5, "count": bad}],
    )
    assert any("preferences[1].count" in m for m in messages)


@pytest.mark.parametrize("bad", [0, -3])
def test_common_count_at_least_one(w: Any, bad: int) -> None:
    assert_refused(w, "count", preferences=[{"instance_type": G5}], count=bad)


@pytest.mark.parametrize("bad", [-1, 10000])
def test_priority_range(w: Any, bad: int) -> None:
    assert_refused(w, "priority", w.admin, priority=bad)


@pytest.mark.parametrize("field", ["max_pending", "checkpoint_interval", "duration"])
@pytest.mark.parametrize("bad", [0, -5])
def test_optional_positive_fields(w: Any, field: str, bad: int) -> None:
    assert_refused(w, field, **{field: bad})


def test_blank_name_and_bad_kind_reported_together(w: Any) -> None:
    with pytest.raises(ValidationFailed) as exc_info:
        submit(w, name=" ", kind="gaming", priority=-1)
    assert {"name", "kind", "priority"} <= set(errors_of(exc_info))


def test_member_above_band_refused_naming_highest_and_band(w: Any) -> None:
    messages = assert_refused(w, "priority", w.red_member, priority=100)
    assert "99" in messages[0]
    assert "low" in messages[0] and "normal" in messages[0]


def test_lead_may_use_normal_not_urgent(w: Any) -> None:
    assert submit(w, w.red_lead, priority=499).priority == 499
    Job.objects.all().delete()
    AuditEntry.objects.none()
    with pytest.raises(ValidationFailed) as exc_info:
        submit(w, w.red_lead, priority=500)
    assert "499" in errors_of(exc_info)["priority"][0]


def test_nobody_without_band_refused_any_priority(w: Any) -> None:
    w.bands["low"].usable_by = ["lead"]
    w.bands["low"].save()
    messages = assert_refused(w, "priority", w.red_member, priority=0)
    assert "no priority band" in messages[0]


def test_no_bands_configured_means_no_band_rule(w: Any) -> None:
    from governance.models import PriorityDefinition

    PriorityDefinition.objects.all().delete()
    assert submit(w, w.red_member, priority=9999).priority == 9999


def _exception(w: Any, *, share: Any = None, job: Any = None, priority: int, **fields: Any) -> PE:
    fields.setdefault("state", ExceptionState.APPROVED)
    fields.setdefault("expires_at", timezone.now() + timedelta(days=1))
    return PE.objects.create(
        requester=w.red_lead,
        team=w.red,
        share=share,
        job=job,
        priority=priority,
        justification="release",
        **fields,
    )


def test_approved_share_exception_covers_submission(w: Any) -> None:
    _exception(w, share=w.red_share, priority=2000)
    assert submit(w, w.red_member, priority=2000).priority == 2000


@pytest.mark.parametrize(
    "fields",
    [
        {"state": ExceptionState.PENDING},
        {"state": ExceptionState.REJECTED},
        {"expires_at_delta": -1},
        {"priority": 1500},
        {"other_share": True},
    ],
)
def test_exception_that_does_not_cover(w: Any, fields: dict[str, Any]) -> None:
    kwargs: dict[str, Any] = {"priority": fields.pop("priority", 2000)}
    if "expires_at_delta" in fields:
        kwargs["expires_at"] = timezone.now() + timedelta(seconds=fields.pop("expires_at_delta"))
    share = w.blue_share if fields.pop("other_share", False) else w.red_share
    _exception(w, share=share, **kwargs, **fields)
    assert_refused(w, "priority", w.red_member, priority=2000)


# --- cancel -------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.RUNNING])
def test_cancel_active_job(w: Any, state: str, django_capture_on_commit_callbacks: Any) -> None:
    job = make_job(w.red_share, w.red_member, state=state)
    with django_capture_on_commit_callbacks() as callbacks:
        svc.job_cancel(actor=w.red_member, job=job, reason="wrong data")
    assert len(callbacks) == 1
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert job.finished_at is not None
    assert JobEvent.objects.get(job=job).type == "cancelled"
    entry = AuditEntry.objects.get(event_type=AuditEvent.JOB_CANCELLED)
    assert entry.actor == w.red_member
    assert entry.before["state"] == state
    assert entry.after["state"] == "CANCELLED"
    assert entry.reason == "wrong data"
    assert entry.job_id == job.pk


@pytest.mark.parametrize(
    "state", [JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED]
)
def test_cancel_finished_job_refused_naming_state(w: Any, state: str) -> None:
    job = make_job(w.red_share, w.red_member, state=state)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.job_cancel(actor=w.admin, job=job)
    assert "state" in errors_of(exc_info)
    job.refresh_from_db()
    assert job.state == state
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("who", "allowed"),
    [
        ("red_member", True),  # the submitter
        ("red_lead", True),
        ("admin", True),
        ("blue_lead", False),
        ("reviewer", False),
        ("outsider", False),
    ],
)
def test_who_may_cancel(w: Any, who: str, allowed: bool) -> None:
    job = make_job(w.red_share, w.red_member)
    if allowed:
        svc.job_cancel(actor=getattr(w, who), job=job)
        job.refresh_from_db()
        assert job.state == JobState.CANCELLED
    else:
        with pytest.raises(PermissionDenied):
            svc.job_cancel(actor=getattr(w, who), job=job)
        job.refresh_from_db()
        assert job.state == JobState.PENDING


def test_another_member_may_not_cancel(w: Any) -> None:
    from tests.factories import make_member

    job = make_job(w.red_share, w.red_member)
    with pytest.raises(PermissionDenied):
        svc.job_cancel(actor=make_member(w.red, "red_other"), job=job)


def test_cancel_unknown_job(w: Any) -> None:
    with pytest.raises(NotFound):
        svc.job_cancel(actor=w.admin, job=424242)


# --- reprioritise -------------------------------------------------------------------------


def test_reprioritise(w: Any, django_capture_on_commit_callbacks: Any) -> None:
    job = make_job(w.red_share, w.red_member, priority=10)
    with django_capture_on_commit_callbacks() as callbacks:
        svc.job_reprioritise(actor=w.red_lead, job=job, priority=300, reason="deadline")
    assert len(callbacks) == 1
    job.refresh_from_db()
    assert job.priority == 300
    event = JobEvent.objects.get(job=job)
    assert event.type == "reprioritised"
    assert "10" in event.message and "300" in event.message
    entry = AuditEntry.objects.get(event_type=AuditEvent.JOB_REPRIORITISED)
    assert entry.actor == w.red_lead
    assert entry.before == {"priority": 10}
    assert entry.after == {"priority": 300}
    assert entry.reason == "deadline"


def test_reprioritise_above_band_refused(w: Any) -> None:
    job = make_job(w.red_share, w.red_member, priority=10)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.job_reprioritise(actor=w.red_member, job=job, priority=100)
    assert "priority" in errors_of(exc_info)
    job.refresh_from_db()
    assert job.priority == 10
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("target", ["job", "share"])
def test_reprioritise_covered_by_job_or_share_exception(w: Any, target: str) -> None:
    job = make_job(w.red_share, w.red_member, priority=10)
    _exception(w, **{target: job if target == "job" else w.red_share}, priority=3000)
    svc.job_reprioritise(actor=w.red_member, job=job, priority=3000)
    job.refresh_from_db()
    assert job.priority == 3000


def test_exception_for_another_job_does_not_cover(w: Any) -> None:
    job = make_job(w.red_share, w.red_member, priority=10)
    other = make_job(w.red_share, w.red_member, priority=10)
    _exception(w, job=other, priority=3000)
    with pytest.raises(ValidationFailed):
        svc.job_reprioritise(actor=w.red_member, job=job, priority=3000)


def test_reprioritise_finished_job_refused(w: Any) -> None:
    job = make_job(w.red_share, w.red_member, state=JobState.SUCCEEDED)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.job_reprioritise(actor=w.admin, job=job, priority=5)
    assert "state" in errors_of(exc_info)


@pytest.mark.parametrize("bad", [-1, 10000])
def test_reprioritise_range(w: Any, bad: int) -> None:
    job = make_job(w.red_share, w.red_member)
    with pytest.raises(ValidationFailed) as exc_info:
        svc.job_reprioritise(actor=w.admin, job=job, priority=bad)
    assert "priority" in errors_of(exc_info)


@pytest.mark.parametrize("who", ["blue_lead", "reviewer", "outsider"])
def test_others_may_not_reprioritise(w: Any, who: str) -> None:
    job = make_job(w.red_share, w.red_member)
    with pytest.raises(PermissionDenied):
        svc.job_reprioritise(actor=getattr(w, who), job=job, priority=1)
