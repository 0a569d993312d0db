"""Workloads through their services (docs/workloads.md): who may create and change them,
the audit entries, field-keyed errors, and the workload a job names."""

from __future__ import annotations

import pytest

from governance.models import AuditEntry, AuditEvent, Interruption, RecoveryStatus, Workload
from governance.services import jobs as job_services
from governance.services import workloads as svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_world()


def create(world, **fields):
    values = {
        "actor": world.red_lead,
        "team": world.red,
        "name": "vision/detector-finetune",
        "interruption": "tolerant",
        "recovery_assumptions": "resumes from the last checkpoint in s3://ckpt",
    }
    values.update(fields)
    return svc.workload_create(**values)


def submit(world, **fields):
    values = {
        "actor": world.red_member,
        "share": world.red_share,
        "name": "finetune",
        "preferences": [{"instance_type": "ml.g5.xlarge", "count": 1}],
    }
    values.update(fields)
    return job_services.job_submit(**values)


def test_a_lead_creates_a_workload_unverified_and_audited(world):
    workload = create(world)
    assert workload.recovery_status == RecoveryStatus.UNVERIFIED
    assert workload.team == world.red
    entry = AuditEntry.objects.get(event_type=AuditEvent.WORKLOAD_CREATED)
    assert entry.actor == world.red_lead
    assert entry.team_id == world.red.pk
    assert entry.after["name"] == "vision/detector-finetune"


def test_admins_may_create_members_and_other_leads_may_not(world):
    assert create(world, actor=world.admin).team == world.red
    for actor in (world.red_member, world.blue_lead, world.reviewer):
        with pytest.raises(PermissionDenied) as exc:
            create(world, actor=actor, name="other")
        assert "team" in exc.value.errors
    assert Workload.objects.count() == 1


def test_bad_input_names_each_field(world):
    create(world)
    with pytest.raises(ValidationFailed) as exc:
        create(world, interruption="sometimes", recovery_assumptions="x" * 5000)
    errors = exc.value.errors
    assert "already has a workload named" in errors["name"][0]
    assert "tolerant, protected" in errors["interruption"][0]
    assert "4000" in errors["recovery_assumptions"][0]
    for bad in ("", " ", "has space", "/leading", "x" * 101):
        with pytest.raises(ValidationFailed) as exc:
            create(world, name=bad)
        assert list(exc.value.errors) == ["name"]
    with pytest.raises(ValidationFailed) as exc:
        create(world, team=999999)
    assert "team" in exc.value.errors


def test_the_same_name_in_another_team_is_fine(world):
    create(world)
    other = create(world, actor=world.blue_lead, team=world.blue)
    assert other.name == "vision/detector-finetune"


def test_update_changes_the_contract_and_refuses_the_status(world):
    workload = create(world)
    svc.workload_update(
        actor=world.red_lead, workload=workload, changes={"interruption": "protected"}
    )
    workload.refresh_from_db()
    assert workload.interruption == Interruption.PROTECTED
    entry = AuditEntry.objects.get(event_type=AuditEvent.WORKLOAD_UPDATED)
    assert entry.before["interruption"] == "tolerant"
    assert entry.after["interruption"] == "protected"
    with pytest.raises(ValidationFailed) as exc:
        svc.workload_update(
            actor=world.red_lead, workload=workload, changes={"recovery_status": "verified"}
        )
    assert "recovery_status" in exc.value.errors
    with pytest.raises(PermissionDenied):
        svc.workload_update(actor=world.red_member, workload=workload, changes={"name": "x"})
    # a no-op writes nothing
    svc.workload_update(actor=world.red_lead, workload=workload, changes={"name": workload.name})
    assert AuditEntry.objects.filter(event_type=AuditEvent.WORKLOAD_UPDATED).count() == 1


def test_a_job_names_a_workload_of_its_team_only(world):
    mine = create(world)
    theirs = create(world, actor=world.blue_lead, team=world.blue, name="nlp/pretrain")
    job = submit(world, workload=mine.pk)
    assert job.workload == mine
    assert job.may_borrow and job.preemptible
    with pytest.raises(ValidationFailed) as exc:
        submit(world, workload=theirs.pk)
    assert "another team" in exc.value.errors["workload"][0]
    with pytest.raises(ValidationFailed) as exc:
        submit(world, workload=123456789)
    assert list(exc.value.errors) == ["workload"]


def test_a_protected_workload_makes_its_jobs_never_borrow_nor_be_victims(world):
    protected = create(world, name="eval/nightly", interruption="protected")
    job = submit(world, workload=protected.pk, may_borrow=True, preemptible=True)
    assert job.may_borrow is False
    assert job.preemptible is False
    assert AuditEntry.objects.get(event_type=AuditEvent.JOB_SUBMITTED).after["workload"] == (
        protected.pk
    )
