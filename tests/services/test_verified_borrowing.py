"""Borrowing requires verified recovery (docs/workloads.md), through the live scheduler
(``run_cycle`` on the stored state): in a share with the setting on, jobs of
workloads whose recovery is not verified, and jobs naming none, never borrow; a verified
workload's jobs borrow as before; the setting is audited with the share."""

from __future__ import annotations

from datetime import datetime

import pytest

from governance.models import AuditEntry, AuditEvent, JobState, Workload
from governance.services import shares as share_services
from scheduler.cycle.run import run_cycle
from tests.factories import TeamFactory, make_admin, make_job, make_lead, make_queue, make_share
from tests.services.test_bridge import _clock_pace, at  # noqa: F401  (the fleet at clock pace)

pytestmark = pytest.mark.django_db

G5 = "ml.g5.xlarge"


def lab(strict: bool, start: datetime | None = None):
    """A queue of 4: a lender's idle share of 2 and a borrower's share of 1 (unlimited
    borrowing), whose first job (submitted at ``start``, default ``at(0)``) fills its own
    limit."""
    from types import SimpleNamespace

    queue = make_queue("q", {G5: 4})
    make_share(queue, TeamFactory(name="lender"), "lender", {G5: 2}, policy="LEND")
    team = TeamFactory(name="borrower")
    share = make_share(
        queue,
        team,
        "b",
        {G5: 1},
        policy="LEND_AND_BORROW",
        borrow_limit=-1,
        borrow_requires_verified_recovery=strict,
    )
    lead = make_lead(team, "b_lead")
    own = make_job(share, lead, name="own", submitted_at=start or at(0), duration=100_000)
    return SimpleNamespace(queue=queue, team=team, share=share, lead=lead, own=own)


def test_unverified_and_unnamed_work_never_borrows_in_a_strict_share() -> None:
    w = lab(strict=True)
    unverified = Workload.objects.create(team=w.team, name="vision/new")
    failed = Workload.objects.create(team=w.team, name="vision/flaky", recovery_status="failed")
    verified = Workload.objects.create(
        team=w.team, name="vision/proven", recovery_status="verified"
    )
    jobs = {
        "none": make_job(w.share, w.lead, name="none", submitted_at=at(1)),
        "unverified": make_job(
            w.share, w.lead, name="unverified", submitted_at=at(1), workload=unverified
        ),
        "failed": make_job(w.share, w.lead, name="failed", submitted_at=at(1), workload=failed),
        "verified": make_job(
            w.share, w.lead, name="verified", submitted_at=at(2), workload=verified
        ),
    }
    for second in range(2, 6):  # cycles after cycle: the idle lent capacity stays open
        run_cycle(w.queue.pk, now=at(second))
    states = {}
    for name, job in jobs.items():
        job.refresh_from_db()
        states[name] = (job.state, job.borrowed)
    assert states == {
        "none": (JobState.PENDING, 0),
        "unverified": (JobState.PENDING, 0),
        "failed": (JobState.PENDING, 0),
        "verified": (JobState.RUNNING, 1),
    }
    # the stored flag is the job's own: the share decides, live, at each cycle
    assert all(job.may_borrow for job in jobs.values())
    # once its workload is verified, a waiting job borrows at the next cycle
    Workload.objects.filter(pk=unverified.pk).update(recovery_status="verified")
    run_cycle(w.queue.pk, now=at(6))
    jobs["unverified"].refresh_from_db()
    assert (jobs["unverified"].state, jobs["unverified"].borrowed) == (JobState.RUNNING, 1)


def test_without_the_setting_unverified_work_borrows() -> None:
    w = lab(strict=False)
    job = make_job(w.share, w.lead, name="free", submitted_at=at(1))
    run_cycle(w.queue.pk, now=at(2))
    job.refresh_from_db()
    assert (job.state, job.borrowed) == (JobState.RUNNING, 1)


def test_the_setting_is_a_share_field_changed_by_admins_and_audited() -> None:
    w = lab(strict=False)
    admin = make_admin("admin")
    share_services.share_update(
        actor=admin,
        share=w.share,
        version=w.share.version,
        changes={"borrow_requires_verified_recovery": True},
        reason="borrowing only for proven recovery",
    )
    w.share.refresh_from_db()
    assert w.share.borrow_requires_verified_recovery is True
    entry = AuditEntry.objects.filter(event_type=AuditEvent.SHARE_UPDATED).latest("id")
    assert entry.before["borrow_requires_verified_recovery"] is False
    assert entry.after["borrow_requires_verified_recovery"] is True
    job = make_job(w.share, w.lead, name="unnamed", submitted_at=at(1))
    run_cycle(w.queue.pk, now=at(2))
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_the_share_preview_shows_what_the_setting_would_start() -> None:
    from django.utils import timezone

    from governance.services.shares import validate_share_fields
    from scheduler import readings

    # The preview reads the queue as it is now: this story happens now.
    now = timezone.now()
    w = lab(strict=True, start=now)
    queue, share, lead = w.queue, w.share, w.lead
    waiting = make_job(share, lead, name="unnamed", submitted_at=now)
    run_cycle(queue.pk, now=now)
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING
    off = validate_share_fields(share, {"borrow_requires_verified_recovery": False})
    preview = readings.preview_share_change(share, off)
    assert [(row["name"], row["rule"]) for row in preview["started"]] == [("unnamed", "borrow")]
    on = validate_share_fields(share, {"borrow_requires_verified_recovery": True})
    assert readings.preview_share_change(share, on)["started"] == []
