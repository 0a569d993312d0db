"""Preference templates and certified-only shares through the job service
(docs/workloads.md#preference-templates): a job naming a workload and no preferences takes
the template with each certified run time as ``runtime``; an entry no longer certified is
skipped with a warning; a certified-only share refuses uncertified preferences, naming
each, unless an admin overrides with a reason (audited)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from governance.models import AuditEntry, AuditEvent, Certification, JobEvent
from governance.services import jobs as job_services
from governance.services import templates as svc
from governance.services.errors import PermissionDenied, ValidationFailed
from tests.certification_world import G5, P4, certified, make_cert_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    w = make_cert_world()
    w.first = certified(w, instance_type=P4, count=1, runtime=1800)
    w.second = certified(w, instance_type=G5, count=2, runtime=3000)
    svc.template_set(
        actor=w.red_lead,
        workload=w.workload,
        entries=[
            {"certification": w.first.pk, "reason": "p4d: 1.7x faster"},
            {"certification": w.second.pk, "reason": "2 x g5: slower, same cost"},
        ],
        max_pending=600,
        deadline_offset=7200,
        max_cost=50,
    )
    return w


def submit(world, **fields):
    values = {
        "actor": world.red_member,
        "share": world.red_share,
        "name": "finetune",
        "preferences": [],
        "workload": world.workload.pk,
    }
    values.update(fields)
    return job_services.job_submit(**values)


def test_a_job_by_workload_alone_takes_the_template_and_its_defaults(world):
    before = timezone.now()
    job = submit(world)
    assert job.preferences == [
        {"instance_type": P4, "count": 1, "runtime": 1800},
        {"instance_type": G5, "count": 2, "runtime": 3000},
    ]
    assert job.max_pending == 600 and job.max_cost == Decimal("50")
    assert before + timedelta(seconds=7200) <= job.deadline <= timezone.now() + timedelta(hours=2)
    assert [e["reason"] for e in job.template["entries"]] == [
        "p4d: 1.7x faster",
        "2 x g5: slower, same cost",
    ]
    assert job.template["skipped"] == []
    assert AuditEntry.objects.filter(event_type=AuditEvent.WORKLOAD_TEMPLATE_CHANGED).count() == 1


def test_the_jobs_own_values_win_over_the_templates_defaults(world):
    job = submit(world, max_pending=60, max_cost=Decimal("80"))
    assert job.max_pending == 60 and job.max_cost == Decimal("80")


def test_an_expired_entry_is_skipped_with_a_warning_at_submission(world):
    Certification.objects.filter(pk=world.first.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    job = submit(world)
    assert job.preferences == [{"instance_type": G5, "count": 2, "runtime": 3000}]
    assert job.template["entries"] == [
        {"position": 2, "certification": world.second.pk, "reason": "2 x g5: slower, same cost"}
    ]
    [skipped] = job.template["skipped"]
    assert skipped["position"] == 1 and skipped["configuration"] == "ml.p4d.24xlarge x1"
    assert skipped["why"].startswith("expired on")
    submitted = JobEvent.objects.get(job=job, type="submitted")
    assert "Template entry 1 (ml.p4d.24xlarge x1) was skipped" in submitted.message


def test_a_template_with_nothing_left_in_force_is_an_error_on_preferences(world):
    Certification.objects.filter(workload=world.workload).update(state="revoked")
    with pytest.raises(ValidationFailed) as exc:
        submit(world)
    assert "expired or revoked" in exc.value.errors["preferences"][0]


def test_a_template_lists_certified_configurations_only_and_only_leads_set_it(world):
    proposed = certified(world, instance_type=G5, count=1)
    Certification.objects.filter(pk=proposed.pk).update(state="proposed")
    with pytest.raises(ValidationFailed) as exc:
        svc.template_set(
            actor=world.red_lead,
            workload=world.workload,
            entries=[{"certification": proposed.pk, "reason": ""}],
            max_pending=-1,
        )
    messages = " ".join(exc.value.errors["entries"])
    assert "is proposed" in messages and "entries[0].reason" in messages
    assert "max_pending" in exc.value.errors
    with pytest.raises(PermissionDenied):
        svc.template_set(actor=world.red_member, workload=world.workload, entries=[])


def test_a_certified_only_share_names_each_uncertified_preference(world):
    world.red_share.certified_only = True
    world.red_share.save()
    assert submit(world).preferences[0]["instance_type"] == P4
    with pytest.raises(ValidationFailed) as exc:
        submit(
            world,
            preferences=[
                {"instance_type": P4, "count": 1},
                {"instance_type": G5, "count": 2},
                {"instance_type": G5 + "-other", "count": 4},
            ],
        )
    # the third names a type without a limit: the share's own rule speaks first
    assert "preferences" in exc.value.errors
    with pytest.raises(ValidationFailed) as uncertified:
        submit(
            world,
            preferences=[{"instance_type": P4, "count": 1}, {"instance_type": G5, "count": 1}],
        )
    assert uncertified.value.errors["preferences"] == [
        "preferences[1]: ml.g5.xlarge x1 is not certified for vision/detector-finetune."
    ]
    with pytest.raises(ValidationFailed) as unnamed:
        submit(world, workload=None, preferences=[{"instance_type": G5, "count": 2}])
    assert "certified-only" in unnamed.value.errors["workload"][0]


def test_only_an_admin_overrides_a_certified_only_share_with_a_reason_audited(world):
    world.red_share.certified_only = True
    world.red_share.save()
    odd = [{"instance_type": G5, "count": 1}]
    with pytest.raises(ValidationFailed) as exc:
        submit(world, preferences=odd, certification_override="urgent fix")
    assert "Only admins" in exc.value.errors["certification_override"][0]
    job = submit(world, actor=world.admin, preferences=odd, certification_override="urgent fix")
    assert job.certification_override == "urgent fix"
    entry = AuditEntry.objects.get(event_type=AuditEvent.JOB_CERTIFICATION_OVERRIDDEN)
    assert entry.actor == world.admin and entry.reason == "urgent fix" and entry.job_id == job.pk


def test_a_lead_asks_for_certified_only_with_a_change_request_and_an_admin_approves(world):
    from governance.services import change_requests

    cr = change_requests.change_request_file(
        actor=world.red_lead,
        share=world.red_share,
        changes={"certified_only": True},
        justification="Only benchmarked configurations from now on.",
    )
    change_requests.change_request_approve(actor=world.admin, request=cr, note="agreed")
    world.red_share.refresh_from_db()
    assert world.red_share.certified_only is True
