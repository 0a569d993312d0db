"""The demo shows a run on borrowed capacity with its exposure (docs/insight.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from governance import demo
from governance.models import Job, JobQueue, JobState
from scheduler.cycle.run import run_cycle


@pytest.mark.django_db
def test_the_demo_has_a_borrowed_run_with_its_exposure_shown(tmp_path: Path) -> None:
    """vision's embedding backfill borrows one of speech's idle instances in the
    inference pool: its page and vision's team view say who lent it and that it may be
    reclaimed; its running so far was all on borrowed capacity, lent by speech."""
    demo.load(tmp_path)
    pool = JobQueue.objects.get(name=demo.LENDING_QUEUE)
    run_cycle(pool.pk)
    job = Job.objects.get(queue=pool, name="vision-embed-backfill")
    assert job.state == JobState.RUNNING and job.borrowed == 1
    client = Client()
    client.force_login(job.share.team.memberships.first().user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="exposure"' in page and "may be reclaimed" in page
    assert "lent by speech (share speech-serving" in page
    assert "on borrowed capacity, lent by speech (share speech-serving)." in page
    team = client.get(f"/teams/{job.share.team_id}/").content.decode()
    exposed = team[team.index("team-borrowed") :]
    assert "vision-embed-backfill" in exposed and "may be reclaimed" in exposed
