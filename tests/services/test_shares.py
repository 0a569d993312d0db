"""Share rules, versions and audit through the service."""

from __future__ import annotations

import pytest

from governance.models import AuditEntry, AuditEvent, JobState, Share, ShareLimit
from governance.models.exceptions import PriorityException
from governance.services import shares as svc
from governance.services.errors import Conflict, PermissionDenied, ValidationFailed
from tests.factories import (
    TeamFactory,
    UserFactory,
    make_admin,
    make_job,
    make_queue,
    make_share,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin():
    return make_admin()


@pytest.fixture
def queue():
    return make_queue("main", {"ml.g5.xlarge": 4, "ml.p4d.24xlarge": 2})


@pytest.fixture
def team():
    return TeamFactory(name="red")


def create(admin, queue, default_team, **fields):
    fields.setdefault("name", "red")
    fields.setdefault("limits", {"ml.g5.xlarge": 2})
    fields.setdefault("team", default_team)
    return svc.share_create(actor=admin, queue=queue, **fields)


def test_create_is_audited_with_snapshot(admin, queue, team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        share = create(
            admin,
            queue,
            team,
            policy="LEND_AND_BORROW",
            borrow_limit=200,
            limits={"ml.g5.xlarge": 2, "ml.p4d.24xlarge": 0},
            reason="initial split",
        )
    assert len(callbacks) == 1
    entry = AuditEntry.objects.get()
    assert entry.event_type == AuditEvent.SHARE_CREATED
    assert entry.actor == admin
    assert (entry.share_id, entry.team_id, entry.queue_id) == (share.pk, team.pk, queue.pk)
    assert entry.reason == "initial split"
    assert entry.after == {
        "id": share.pk,
        "queue": queue.pk,
        "team": team.pk,
        "name": "red",
        "policy": "LEND_AND_BORROW",
        "borrow_limit": 200,
        "limits": {"ml.g5.xlarge": 2, "ml.p4d.24xlarge": 0},
        "in_share_preemption": False,
        "preemption_retries": None,
        "enabled": True,
        "borrow_requires_verified_recovery": False,
        "certified_only": False,
        "version": 1,
    }


def test_lend_and_borrow_defaults_to_unlimited(admin, queue, team):
    assert create(admin, queue, team, policy="LEND_AND_BORROW").borrow_limit == -1


def _refused(field, fragment, fn):
    shares_before = Share.objects.count()
    with pytest.raises(ValidationFailed) as exc:
        fn()
    assert field in exc.value.errors, exc.value.errors
    assert fragment in " ".join(exc.value.errors[field])
    assert Share.objects.count() == shares_before
    return exc.value


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"name": ""}, "name", "name"),
        ({"limits": {}}, "limits", "1 to 5"),
        ({"limits": {"ml.g5.xlarge": -1}}, "limits", "ml.g5.xlarge"),
        ({"limits": {"ml.g5.xlarge": "2"}}, "limits", "ml.g5.xlarge"),
        ({"limits": {"ml.m5.large": 1}}, "limits", "ml.m5.large"),
        ({"limits": None}, "limits", "map"),
        ({"policy": "SHARE"}, "policy", "RESERVE"),
        ({"policy": "LEND", "borrow_limit": 100}, "borrow_limit", "LEND_AND_BORROW"),
        ({"policy": "RESERVE", "borrow_limit": -1}, "borrow_limit", "LEND_AND_BORROW"),
        ({"policy": "LEND_AND_BORROW", "borrow_limit": -2}, "borrow_limit", "-1"),
        ({"preemption_retries": -1}, "preemption_retries", ">= 0"),
        ({"team": None}, "team", "team"),
    ],
)
def test_create_rules(admin, queue, team, fields, field, fragment):
    _refused(field, fragment, lambda: create(admin, queue, team, **fields))
    assert not AuditEntry.objects.exists()


def test_at_most_five_limits(admin, team):
    names = [f"ml.g{i}.xlarge" for i in range(6)]
    queue = make_queue("wide", dict.fromkeys(names, 1))
    _refused("limits", "1 to 5", lambda: create(admin, queue, team, limits=dict.fromkeys(names, 1)))
    create(admin, queue, team, limits=dict.fromkeys(names[:5], 1))


def test_name_unique_in_queue_only(admin, queue, team):
    create(admin, queue, team, name="red")
    _refused("name", "red", lambda: create(admin, queue, team, name="red"))
    other = make_queue("other", {"ml.g5.xlarge": 1})
    create(admin, other, team, name="red")


def test_at_most_twenty_shares_per_queue(admin, queue, team):
    for i in range(20):
        make_share(queue, team, f"s{i}")
    _refused("queue", "20", lambda: create(admin, queue, team, name="one-more"))


def test_update_increments_version_and_audits(
    admin, queue, team, django_capture_on_commit_callbacks
):
    share = create(admin, queue, team)
    with django_capture_on_commit_callbacks() as callbacks:
        svc.share_update(
            actor=admin,
            share=share,
            version=1,
            changes={"limits": {"ml.g5.xlarge": 3}, "in_share_preemption": True},
            reason="more work this quarter",
        )
    assert len(callbacks) == 1
    share.refresh_from_db()
    assert share.version == 2
    entry = AuditEntry.objects.get(event_type=AuditEvent.SHARE_UPDATED)
    assert entry.actor == admin
    assert entry.reason == "more work this quarter"
    assert entry.before["limits"] == {"ml.g5.xlarge": 2}
    assert entry.before["version"] == 1
    assert entry.after["limits"] == {"ml.g5.xlarge": 3}
    assert entry.after["in_share_preemption"] is True
    assert entry.after["version"] == 2


def test_stale_version_conflicts_and_changes_nothing(admin, queue, team):
    share = create(admin, queue, team)
    svc.share_update(actor=admin, share=share, version=1, changes={"enabled": False})
    with pytest.raises(Conflict) as exc:
        svc.share_update(
            actor=admin, share=share, version=1, changes={"limits": {"ml.g5.xlarge": 4}}
        )
    assert "2" in exc.value.errors["version"][0]
    assert exc.value.current["version"] == 2
    assert exc.value.current["enabled"] is False
    assert svc.limits_map(share) == {"ml.g5.xlarge": 2}
    assert AuditEntry.objects.filter(event_type=AuditEvent.SHARE_UPDATED).count() == 1


def test_version_required(admin, queue, team):
    share = create(admin, queue, team)
    with pytest.raises(ValidationFailed) as exc:
        svc.share_update(actor=admin, share=share, version=None, changes={"enabled": False})
    assert "version" in exc.value.errors


def test_policy_switch_clears_or_defaults_borrow_limit(admin, queue, team):
    share = create(admin, queue, team, policy="LEND_AND_BORROW", borrow_limit=50)
    share = svc.share_update(actor=admin, share=share, version=1, changes={"policy": "LEND"})
    assert share.borrow_limit is None
    share = svc.share_update(
        actor=admin, share=share, version=2, changes={"policy": "LEND_AND_BORROW"}
    )
    assert share.borrow_limit == -1
    with pytest.raises(ValidationFailed) as exc:
        svc.share_update(
            actor=admin, share=share, version=3, changes={"policy": "RESERVE", "borrow_limit": 10}
        )
    assert "borrow_limit" in exc.value.errors


def test_update_rules_change_nothing(admin, queue, team):
    share = create(admin, queue, team)
    with pytest.raises(ValidationFailed) as exc:
        svc.share_update(
            actor=admin,
            share=share,
            version=1,
            changes={"limits": {"ml.m5.large": 1}, "name": "", "queue": make_queue("x")},
        )
    assert {"limits", "name", "queue"} <= set(exc.value.errors)
    share.refresh_from_db()
    assert (share.name, share.version) == ("red", 1)
    assert svc.limits_map(share) == {"ml.g5.xlarge": 2}


def test_no_op_update_keeps_version(admin, queue, team):
    share = create(admin, queue, team)
    svc.share_update(actor=admin, share=share, version=1, changes={"name": "red"})
    share.refresh_from_db()
    assert share.version == 1
    assert not AuditEntry.objects.filter(event_type=AuditEvent.SHARE_UPDATED).exists()


def test_update_never_stops_running_jobs(admin, queue, team):
    share = create(admin, queue, team)
    job = make_job(share, admin, state=JobState.RUNNING)
    svc.share_update(actor=admin, share=share, version=1, changes={"limits": {"ml.g5.xlarge": 0}})
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_delete_unused_share_is_audited(admin, queue, team):
    share = create(admin, queue, team)
    share_id = share.pk
    svc.share_delete(actor=admin, share=share, reason="team merged")
    assert not Share.objects.filter(pk=share_id).exists()
    assert not ShareLimit.objects.filter(share_id=share_id).exists()
    entry = AuditEntry.objects.get(event_type=AuditEvent.SHARE_DELETED)
    assert entry.actor == admin
    assert entry.share_id == share_id
    assert entry.reason == "team merged"
    assert entry.before["limits"] == {"ml.g5.xlarge": 2}
    assert entry.before["version"] == 1
    assert entry.after is None


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED])
def test_delete_refused_with_jobs(admin, queue, team, state):
    share = create(admin, queue, team)
    make_job(share, admin, state=state)
    with pytest.raises(ValidationFailed) as exc:
        svc.share_delete(actor=admin, share=share)
    assert "Disable" in exc.value.errors["share"][0]
    assert Share.objects.filter(pk=share.pk).exists()
    assert not AuditEntry.objects.filter(event_type=AuditEvent.SHARE_DELETED).exists()


def test_delete_refused_with_exceptions(admin, queue, team):
    from django.utils import timezone

    share = create(admin, queue, team)
    PriorityException.objects.create(
        requester=admin,
        team=team,
        share=share,
        priority=600,
        justification="x",
        expires_at=timezone.now(),
    )
    with pytest.raises(ValidationFailed) as exc:
        svc.share_delete(actor=admin, share=share)
    assert "share" in exc.value.errors


def test_only_admins_write_shares(queue, team):
    from tests.factories import make_lead

    share = make_share(queue, team, "red")
    for actor in (make_lead(team), UserFactory(username="nobody")):
        with pytest.raises(PermissionDenied):
            svc.share_create(actor=actor, queue=queue, team=team, name="x", limits={})
        with pytest.raises(PermissionDenied):
            svc.share_update(actor=actor, share=share, version=1, changes={"enabled": False})
        with pytest.raises(PermissionDenied):
            svc.share_delete(actor=actor, share=share)
    share.refresh_from_db()
    assert share.enabled and share.version == 1
    assert not AuditEntry.objects.exists()
