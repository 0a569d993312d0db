"""Certified configurations on the pages (docs/workloads.md): the workload page shows
them side by side; a lead proposes (every problem at once), a reviewer certifies or
rejects, a lead revokes and builds the template; the job form takes a workload alone and
the job page says which template entry ran and why; the share editor's certified-only
setting."""

from __future__ import annotations

import pytest
from django.test import Client

from governance.models import Certification, Job
from tests.certification_world import G5, P4, certified, make_cert_world, propose

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_cert_world()


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def certified_only_form(world) -> dict[str, object]:
    """The red share's settings as the share forms post them, with certified-only on."""
    return {
        "policy": world.red_share.policy,
        "borrow_limit": "",
        "preemption_retries": "",
        "limit_type_0": G5,
        "limit_count_0": 2,
        "limit_type_1": P4,
        "limit_count_1": 1,
        "certified_only": "on",
    }


def test_a_lead_proposes_on_the_workload_page_every_problem_at_once(world):
    lead = signed_in(world.red_lead)
    url = f"/workloads/{world.workload.pk}/"
    page = lead.get(url)
    assert page.status_code == 200 and b"Propose a configuration" in page.content
    bad = lead.post(
        f"{url}certifications/",
        {
            "instance_type": G5,
            "plan": "",
            "count": "0",
            "runtime": "60",
            "utilization": "150",
            "failure_rate": "1",
        },
    )
    assert bad.status_code == 400
    text = bad.content.decode()
    assert "greater than or equal to 1" in text and "less than or equal to 100" in text
    good = lead.post(
        f"{url}certifications/",
        {
            "instance_type": G5,
            "count": "2",
            "runtime": "3600",
            "utilization": "90",
            "failure_rate": "1.5",
            "converged": "on",
            "output_valid": "on",
            "notes": "ok",
        },
    )
    assert good.status_code == 302
    cert = Certification.objects.get(workload=world.workload)
    assert (cert.count, cert.runtime, cert.converged) == (2, 3600, True)


def test_the_page_shows_configurations_side_by_side_and_reviewers_decide(world):
    first = propose(world, instance_type=P4, count=1, runtime=1800)
    second = propose(world)
    reviewer = signed_in(world.reviewer)
    page = reviewer.get(f"/workloads/{world.workload.pk}/").content.decode()
    assert "ml.p4d.24xlarge x1" in page and "ml.g5.xlarge x2" in page and "Certify" in page
    # the proposer sees no decision form
    assert (
        "Certify</button>"
        not in signed_in(world.red_lead).get(f"/workloads/{world.workload.pk}/").content.decode()
    )
    missing = reviewer.post(f"/certifications/{first.pk}/decide/", {"decision": "certify"})
    assert missing.status_code == 400 and "Say why" in missing.content.decode()
    assert (
        reviewer.post(
            f"/certifications/{first.pk}/decide/", {"decision": "certify", "note": "good"}
        ).status_code
        == 302
    )
    reviewer.post(f"/certifications/{second.pk}/decide/", {"decision": "reject", "note": "no eval"})
    page = reviewer.get(f"/workloads/{world.workload.pk}/").content.decode()
    # the cost of a run at the type's price: 2 x 1.41 $/h x 1 h = $2.82
    assert "cert-certified" in page and "cert-rejected" in page and "$2.82" in page
    lead = signed_in(world.red_lead)
    assert lead.post(f"/certifications/{first.pk}/revoke/", {"reason": ""}).status_code == 400
    assert (
        lead.post(f"/certifications/{first.pk}/revoke/", {"reason": "new image"}).status_code == 302
    )
    assert Certification.objects.get(pk=first.pk).state == "revoked"


def test_a_lead_builds_a_template_and_a_job_by_workload_alone_shows_its_entry(world):
    fast = certified(world, instance_type=P4, count=1, runtime=1800)
    lead = signed_in(world.red_lead)
    url = f"/workloads/{world.workload.pk}/template/"
    assert lead.get(url).status_code == 200
    bad = lead.post(url, {"entry_0": str(fast.pk), "reason_0": "", "deadline_offset": "-3"})
    assert bad.status_code == 400
    assert "say why it stands in this place" in bad.content.decode()
    assert lead.post(url, {"entry_0": str(fast.pk), "reason_0": "fastest"}).status_code == 302
    page = lead.get(f"/workloads/{world.workload.pk}/").content.decode()
    assert "fastest" in page
    assert signed_in(world.red_member).get(url).status_code == 403

    world.red_share.certified_only = True
    world.red_share.save()
    submitted = signed_in(world.red_member).post(
        "/jobs/new/",
        {
            "share": str(world.red_share.pk),
            "name": "by-workload",
            "kind": "training",
            "priority": "0",
            "workload": str(world.workload.pk),
            "may_borrow": "on",
            "preemptible": "on",
            "deadline_zone": "UTC",
        },
    )
    assert submitted.status_code == 302, submitted.content.decode()[:3000]
    job = Job.objects.get(name="by-workload")
    Job.objects.filter(pk=job.pk).update(preference=0)
    page = signed_in(world.red_member).get(f"/jobs/{job.pk}/").content.decode()
    assert "runs on template entry 1 (preference 1): fastest" in page


def test_the_share_editor_previews_and_saves_certified_only(world):
    from tests.factories import make_job

    fast = certified(world, instance_type=P4, count=1)
    make_job(world.red_share, world.red_member, name="no-workload")
    make_job(
        world.red_share,
        world.red_member,
        name="odd-config",
        workload=world.workload,
        preferences=[{"instance_type": P4, "count": 1}, {"instance_type": G5, "count": 2}],
    )
    make_job(
        world.red_share,
        world.red_member,
        name="fine",
        workload=world.workload,
        preferences=[{"instance_type": P4, "count": fast.count}],
    )
    admin = signed_in(world.admin)
    url = f"/shares/{world.red_share.pk}/"
    assert 'name="certified_only"' in admin.get(url + "edit/").content.decode()
    form = {
        **certified_only_form(world),
        "version": world.red_share.version,
        "enabled": "on",
        "reason": "benchmarked work only",
    }
    preview = admin.post(url + "preview/", form).content.decode()
    assert "Certified configurations only" in preview
    assert "no-workload</a>: names no workload" in preview
    assert "odd-config</a>: ml.g5.xlarge x2 not certified for vision/detector-finetune" in preview
    assert "fine</a>" not in preview
    assert admin.post(url + "edit/", form).status_code == 302
    world.red_share.refresh_from_db()
    assert world.red_share.certified_only is True
    assert "certified only" in admin.get(url).content.decode()


def test_an_expired_entry_is_skipped_with_a_warning_on_the_job_form(world):
    from datetime import timedelta

    from django.utils import timezone

    from governance.services import templates

    fast = certified(world, instance_type=P4, count=1, runtime=1800)
    slow = certified(world, instance_type=G5, count=2, runtime=3600)
    templates.template_set(
        actor=world.red_lead,
        workload=world.workload,
        entries=[
            {"certification": fast.pk, "reason": "fastest"},
            {"certification": slow.pk, "reason": "fallback"},
        ],
    )
    Certification.objects.filter(pk=fast.pk).update(expires_at=timezone.now() - timedelta(days=1))
    member = signed_in(world.red_member)
    answer = member.post(
        "/jobs/new/",
        {
            "share": str(world.red_share.pk),
            "name": "after-expiry",
            "kind": "training",
            "priority": "0",
            "workload": str(world.workload.pk),
            "deadline_zone": "UTC",
        },
        follow=True,
    )
    text = answer.content.decode()
    assert "Template entry 1 (ml.p4d.24xlarge x1) was skipped: its certification expired on" in text
    assert "entry 1 (ml.p4d.24xlarge x1) skipped: expired on" in text
    assert Job.objects.get(name="after-expiry").preferences == [
        {"instance_type": G5, "count": 2, "runtime": 3600}
    ]
    page = member.get(f"/workloads/{world.workload.pk}/").content.decode()
    assert "cert-expired" in page


def test_an_admin_overrides_a_certified_only_share_on_the_job_form(world):
    world.red_share.certified_only = True
    world.red_share.save()
    form = {
        "share": str(world.red_share.pk),
        "name": "override",
        "kind": "training",
        "priority": "0",
        "workload": str(world.workload.pk),
        "deadline_zone": "UTC",
        "pref_type_0": G5,
        "pref_count_0": "1",
        "certification_override": "incident fix",
    }
    refused = signed_in(world.red_member).post("/jobs/new/", form)
    assert refused.status_code == 400
    text = refused.content.decode()
    assert "Only admins may override" in text
    assert "Preference 1: ml.g5.xlarge x1 is not certified for vision/detector-finetune" in text
    assert signed_in(world.admin).post("/jobs/new/", form).status_code == 302
    assert Job.objects.get(name="override").certification_override == "incident fix"


def test_a_lead_asks_for_certified_only_on_the_change_request_form(world):
    from governance.models import ShareChangeRequest

    lead = signed_in(world.red_lead)
    url = f"/shares/{world.red_share.pk}/request/"
    assert 'name="certified_only"' in lead.get(url).content.decode()
    filed = lead.post(
        url,
        {
            **certified_only_form(world),
            "justification": "Only benchmarked configurations from now on.",
        },
    )
    assert filed.status_code == 302
    assert ShareChangeRequest.objects.get().proposed == {"certified_only": True}
