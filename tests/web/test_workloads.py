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
