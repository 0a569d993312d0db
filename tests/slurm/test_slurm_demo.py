"""The demo's Slurm queue (DEMO_SLURM=1): loaded once, its jobs run on the local Slurm."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from governance import demo
from governance.models import Job, JobQueue, JobState, SlurmRun
from tests.slurm.conftest import drive

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def test_the_demo_queue_runs_its_jobs_on_the_local_slurm(slurm_env: Any) -> None:
    demo.load()
    assert demo.load_slurm() is True
    assert demo.load_slurm() is False
    queue = JobQueue.objects.get(name=demo.SLURM_QUEUE)
    world = SimpleNamespace(queue=queue, cli=slurm_env.cli)
    drive(world, lambda: SlurmRun.objects.filter(job__queue=queue, started_seen=True).exists())
    running = Job.objects.filter(queue=queue, state=JobState.RUNNING)
    assert running.exists()
    assert SlurmRun.objects.filter(job__in=running, started_seen=True).exists()
