"""The workload pages (docs/workloads.md): the team view lists the team's workloads with
their recovery status; a workload's page shows its history with links to evidence."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from governance.models import RecoveryChange, Workload
from tests.factories import make_job, make_world

pytestmark = pytest.mark.django_db


def test_team_view_lists_workloads_and_the_page_links_evidence():
    world = make_world()
    verified = Workload.objects.create(
        team=world.red, name="vision/detector-finetune", recovery_status="verified"
    )
    Workload.objects.create(team=world.red, name="eval/nightly", interruption="protected")
    Workload.objects.create(team=world.blue, name="nlp/pretrain")
    job = make_job(world.red_share, world.red_lead, name="evidence-run", workload=verified)
    RecoveryChange.objects.create(
        workload=verified,
        at=timezone.now(),
        before="unverified",
        after="verified",
        evidence_job=job,
        note="resumed after a reclaim; output valid",
    )
    client = Client()
    client.force_login(world.red_lead)
    page = client.get(f"/teams/{world.red.pk}/").content.decode()
    assert f"/workloads/{verified.pk}/" in page
    assert "eval/nightly" in page and "Protected" in page
    assert "nlp/pretrain" not in page
    detail = client.get(f"/workloads/{verified.pk}/")
    assert detail.status_code == 200
    text = detail.content.decode()
    assert "unverified → <strong>verified</strong>" in text
    assert f'href="/jobs/{job.pk}/"' in text
    assert "resumed after a reclaim" in text
    assert client.get("/workloads/999999/").status_code == 404


def test_a_lead_judges_a_resumed_runs_output_on_the_job_page():
    from governance.models import JobState

    world = make_world()
    workload = Workload.objects.create(team=world.red, name="vision/detector-finetune")
    job = make_job(
        world.red_share,
        world.red_member,
        name="resumed",
        state=JobState.SUCCEEDED,
        preemptions=1,
        workload=workload,
        finished_at=timezone.now(),
    )
    member, lead = Client(), Client()
    member.force_login(world.red_member)
    lead.force_login(world.red_lead)
    assert 'id="judge-output"' not in member.get(f"/jobs/{job.pk}/").content.decode()
    page = lead.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="judge-output"' in page
    assert f'href="/workloads/{workload.pk}/"' in page
    bad = lead.post(f"/jobs/{job.pk}/output/", {"valid": "maybe", "note": "x"})
    assert bad.status_code == 400
    assert 'id="judge-output"' in bad.content.decode()
    done = lead.post(f"/jobs/{job.pk}/output/", {"valid": "true", "note": "eval matches"})
    assert done.status_code == 302
    workload.refresh_from_db()
    assert workload.recovery_status == "verified"
    history = lead.get(f"/workloads/{workload.pk}/").content.decode()
    assert f'href="/jobs/{job.pk}/"' in history and "eval matches" in history
    refused = member.post(f"/jobs/{job.pk}/output/", {"valid": "false"})
    assert refused.status_code == 403
    workload.refresh_from_db()
    assert workload.recovery_status == "verified"


def test_the_job_form_offers_the_teams_workloads_and_submits_with_one():
    from governance.models import Job

    world = make_world()
    protected = Workload.objects.create(
        team=world.red, name="eval/nightly", interruption="protected"
    )
    theirs = Workload.objects.create(team=world.blue, name="nlp/pretrain")
    client = Client()
    client.force_login(world.red_member)
    form = client.get("/jobs/new/").content.decode()
    assert f'<option value="{protected.pk}"' in form
    assert "nlp/pretrain" not in form
    data = {
        "share": world.red_share.pk,
        "name": "nightly",
        "kind": "training",
        "priority": 0,
        "pref_type_0": "ml.g5.xlarge",
        "pref_count_0": 1,
        "may_borrow": "on",
        "preemptible": "on",
    }
    refused = client.post("/jobs/new/", {**data, "workload": theirs.pk})
    assert refused.status_code == 400
    assert "workload" in refused.context["form"].errors
    response = client.post("/jobs/new/", {**data, "workload": protected.pk})
    assert response.status_code == 302
    job = Job.objects.get(name="nightly")
    assert job.workload == protected
    assert (job.may_borrow, job.preemptible) == (False, False)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="/workloads/{protected.pk}/"' in page and "never borrows" in page


def test_a_lead_adds_and_edits_a_workload_in_the_browser():
    world = make_world()
    lead, member = Client(), Client()
    lead.force_login(world.red_lead)
    member.force_login(world.red_member)
    assert (
        f"/teams/{world.red.pk}/workloads/new/"
        in lead.get(f"/teams/{world.red.pk}/").content.decode()
    )
    assert "workloads/new/" not in member.get(f"/teams/{world.red.pk}/").content.decode()
    assert member.get(f"/teams/{world.red.pk}/workloads/new/").status_code == 403
    url = f"/teams/{world.red.pk}/workloads/new/"
    bad = lead.post(url, {"name": "bad name", "interruption": "tolerant"})
    assert bad.status_code == 400
    assert "letters, digits" in bad.context["form"].errors["name"][0]
    done = lead.post(
        url, {"name": "vision/x", "interruption": "tolerant", "recovery_assumptions": "s3 ckpt"}
    )
    assert done.status_code == 302
    workload = Workload.objects.get(team=world.red, name="vision/x")
    assert lead.get(f"/workloads/{workload.pk}/edit/").status_code == 200
    lead.post(
        f"/workloads/{workload.pk}/edit/",
        {"name": "vision/x", "interruption": "protected", "recovery_assumptions": "s3 ckpt"},
    )
    workload.refresh_from_db()
    assert workload.interruption == "protected"
    dup = lead.post(url, {"name": "vision/x", "interruption": "tolerant"})
    assert dup.status_code == 400 and "already has" in dup.context["form"].errors["name"][0]


def test_the_jobs_page_filters_by_workload():
    world = make_world()
    workload = Workload.objects.create(team=world.red, name="vision/x")
    mine = make_job(world.red_share, world.red_lead, name="of-the-workload", workload=workload)
    make_job(world.red_share, world.red_lead, name="other-job")
    client = Client()
    client.force_login(world.red_lead)
    assert (
        f"/jobs/?workload={workload.pk}"
        in client.get(f"/workloads/{workload.pk}/").content.decode()
    )
    page = client.get(f"/jobs/?workload={workload.pk}").content.decode()
    assert f'href="/jobs/{mine.pk}/"' in page and "other-job" not in page
    assert client.get("/jobs/?workload=abc").status_code == 200  # a bad filter is ignored
