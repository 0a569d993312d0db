"""The slurm executor against the real local Slurm (issue 11's "Done when" list).

Each test drives the executor's passes (``pass_.sync_queue``: the beat task's work) in
this process, on the test database; Slurm itself runs the jobs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from governance.models import (
    AuditEntry,
    AuditEvent,
    Job,
    JobEvent,
    JobState,
    QueueCapacity,
    SlurmQueueConfig,
    SlurmRun,
    SlurmRunState,
    SlurmTypeConfig,
)
from governance.services import jobs as job_services
from scheduler.cycle.run import run_cycle
from scheduler.executors.slurm import identity, orders, pass_
from scheduler.executors.slurm.cli import Cli, SlurmUnreachable
from tests.slurm.conftest import CONF, ROOT, TYPE_A, TYPE_B, USER_A, drive

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def submit(world: Any, share: Any, user: Any, prefs: list[tuple[str, int]], argv: list[str]) -> Job:
    return job_services.job_submit(
        actor=user,
        share=share,
        name="j",
        preferences=[{"instance_type": t, "count": n} for t, n in prefs],
        program={"command": argv},
    )


def slurm_run(job: Job) -> SlurmRun | None:
    job.refresh_from_db()
    return SlurmRun.objects.filter(job=job, run=job.run).first()


def state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def events(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("id").values_list("type", flat=True))


def in_squeue(world: Any, slurm_job_id: int) -> dict[str, Any] | None:
    return next((j for j in world.cli.squeue() if j["job_id"] == slurm_job_id), None)


def test_a_job_submitted_through_the_api_runs_in_slurm_and_completes(slurm: Any) -> None:
    client = APIClient()
    client.force_authenticate(slurm.owner_user)
    response = client.post(
        "/api/jobs/",
        {
            "share": slurm.owner.pk,
            "name": "api-job",
            "preferences": [{"instance_type": TYPE_A, "count": 2}],
            "program": {"command": ["sleep", "2"], "env": {"MODE": "a b;c"}},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    run = drive(slurm, lambda: (r := slurm_run(job)) and r.slurm_job_id and r)
    live = in_squeue(slurm, run.slurm_job_id)
    assert live is not None
    assert live["partition"] == "gpu-a"
    assert live["name"] == f"{slurm.prefix}-{job.pk}-r1"
    assert live["tres_per_task"] == "gres:gpu:1"
    assert live["tres_req_str"].startswith("cpu=2,")  # two tasks: two instances
    drive(slurm, lambda: state(job) == JobState.SUCCEEDED)
    assert "started" in events(job) and "completed" in events(job)
    detail = client.get(f"/api/jobs/{job.pk}/").json()
    [shown] = detail["slurm_runs"]
    assert shown["slurm_job_id"] == run.slurm_job_id
    assert shown["stdout"].endswith(f"-{run.slurm_job_id}.out")
    assert shown["slurm_state"] == "COMPLETED" and shown["exit_code"] == 0
    page = client_page(slurm, job)
    assert str(run.slurm_job_id) in page and shown["stdout"] in page


def client_page(world: Any, job: Job) -> str:
    from django.test import Client

    web = Client()
    web.force_login(world.admin)
    return web.get(f"/jobs/{job.pk}/").content.decode()


def test_the_job_sees_its_id_run_and_checkpoint_in_its_environment(slurm: Any) -> None:
    job = submit(
        slurm,
        slurm.owner,
        slurm.owner_user,
        [(TYPE_A, 1)],
        ["sh", "-c", 'echo "$GOV_JOB_ID $GOV_RUN $GOV_CHECKPOINT_DIR $GOV_RESUME_WORK $X"'],
    )
    job.program["env"] = {"X": "it's $HOME"}
    job.save(update_fields=["program"])
    drive(slurm, lambda: state(job) == JobState.SUCCEEDED)
    run = slurm_run(job)
    assert run is not None
    with open(run.stdout) as handle:
        line = handle.read().strip()
    assert line.split()[:2] == [str(job.pk), "1"]
    assert line.endswith("0 it's $HOME")  # passed as data: no shell expanded it


def test_the_job_and_the_product_never_share_their_environments(
    slurm: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The product's process holds its secrets in its environment: a job gets only what a
    # program needs of it.
    monkeypatch.setenv("SLURM_HOOK_TOKEN", "hook-token-never-in-a-job")
    monkeypatch.setenv("SECRET_KEY", "secret-key-never-in-a-job")
    # And a job's variables never reach the product's own commands: with its PATH, the
    # product would run this sbatch, on its host, as its user.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\nexit 1\n")
    (fake / "sbatch").chmod(0o755)
    path = f"{fake}:{os.environ['PATH']}"
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["env"])
    job.program["env"] = {"MODE": "fast, with a comma", "PATH": path, "LD_PRELOAD": ""}
    job.save(update_fields=["program"])
    drive(slurm, lambda: state(job) == JobState.SUCCEEDED)
    assert not (tmp_path / "ran").exists()
    run = slurm_run(job)
    assert run is not None
    with open(run.stdout) as handle:
        seen = dict(line.split("=", 1) for line in handle.read().splitlines() if "=" in line)
    assert seen["GOV_JOB_ID"] == str(job.pk)
    assert seen["MODE"] == "fast, with a comma"
    assert seen["PATH"] == path  # the job's own
    # It runs as its team's user, and sees that user's name and home, not the product's.
    assert seen["USER"] == seen["LOGNAME"] == USER_A
    assert seen["HOME"] == identity.resolve(USER_A).home
    assert seen["SLURM_JOB_ID"] == str(run.slurm_job_id)
    for secret in ("SLURM_HOOK_TOKEN", "SECRET_KEY", "DATABASE_URL", "REDIS_URL"):
        assert secret not in seen
    assert "never-in-a-job" not in "".join(seen.values())


def test_a_job_gets_from_slurm_only_what_the_product_admitted(slurm: Any) -> None:
    client = APIClient()
    client.force_authenticate(slurm.owner_user)
    body = {
        "share": slurm.owner.pk,
        "name": "array",
        "preferences": [{"instance_type": TYPE_A, "count": 1}],
        "program": {"script": "#!/bin/sh\n#SBATCH --array=0-2\necho hi\n"},
    }
    refused = client.post("/api/jobs/", body, format="json")
    assert refused.status_code == 400
    assert "#SBATCH directive" in str(refused.json()["program"])
    # A job stored before that rule (written here directly): Slurm runs it once, on the
    # one GPU admitted, neither its directive nor its SBATCH_ variable read as options.
    script = '#!/bin/sh\n#SBATCH --array=0-2\necho "task=${SLURM_ARRAY_TASK_ID:-none}"\n'
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["true"])
    job.program = {"script": script, "env": {"SBATCH_ARRAY_INX": "0-2"}}
    job.save(update_fields=["program"])
    drive(slurm, lambda: state(job) == JobState.SUCCEEDED)
    run = slurm_run(job)
    assert run is not None
    with open(run.stdout) as handle:
        assert handle.read().strip() == "task=none"
    [listed] = [j for j in slurm.cli.squeue() if j["name"] == run.name]  # no array of three
    assert listed["job_id"] == run.slurm_job_id and not listed["array_job_id"]


def test_reclaim_signals_and_cancels_the_borrower_and_starts_the_owner(slurm: Any) -> None:
    borrower = submit(slurm, slurm.borrower, slurm.borrower_user, [(TYPE_A, 8)], ["sleep", "120"])
    b_run = drive(slurm, lambda: (r := slurm_run(borrower)) and r.started_seen and r)
    owner = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 4)], ["sleep", "120"])
    o_run = drive(slurm, lambda: (r := slurm_run(owner)) and r.started_seen and r)
    b_run.refresh_from_db()
    assert b_run.state == SlurmRunState.ENDED
    assert b_run.signalled_at is not None
    assert in_squeue(slurm, o_run.slurm_job_id)["job_state"] == "RUNNING"
    preempted = JobEvent.objects.get(job=borrower, type="preempted")
    assert preempted.data["reason"] == "reclaim"
    assert "stopped" in events(borrower)
    assert state(borrower) == JobState.PENDING


def test_a_preference_falls_back_to_the_second_partition_when_the_first_is_full(
    slurm: Any,
) -> None:
    filler = submit(slurm, slurm.borrower, slurm.borrower_user, [(TYPE_A, 4)], ["sleep", "60"])
    own = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 4)], ["sleep", "60"])
    drive(slurm, lambda: state(filler) == state(own) == JobState.RUNNING)
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 2), (TYPE_B, 2)], ["sleep", "60"])
    run = drive(slurm, lambda: (r := slurm_run(job)) and r.slurm_job_id and r)
    job.refresh_from_db()
    assert job.preference == 1
    assert in_squeue(slurm, run.slurm_job_id)["partition"] == "gpu-b"


def test_a_node_set_down_preempts_its_run_as_lost_capacity_until_it_returns(slurm: Any) -> None:
    # One instance per node here: the run's node is the one set down.
    SlurmTypeConfig.objects.filter(queue=slurm.queue, instance_type__name=TYPE_A).update(
        gpus_per_instance=4
    )
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["sleep", "120"])
    run = drive(slurm, lambda: (r := slurm_run(job)) and r.started_seen and r)
    node = in_squeue(slurm, run.slurm_job_id)["nodes"]
    capacity = QueueCapacity.objects.get(queue=slurm.queue, instance_type__name=TYPE_A)
    assert capacity.count == 2
    slurm.cli.run("scontrol", ["update", f"nodename={node}", "state=down", "reason=test"])
    drive(slurm, lambda: JobEvent.objects.filter(job=job, type="preempted").exists())
    preempted = JobEvent.objects.get(job=job, type="preempted")
    assert preempted.data["reason"] == "capacity_lost" and preempted.data["counted"] is False
    capacity.refresh_from_db()
    assert capacity.count == 1
    # Requeued and started again on the node left, as a new Slurm job.
    second = drive(slurm, lambda: (r := slurm_run(job)) and r.run == 2 and r.started_seen and r)
    assert second.slurm_job_id != run.slurm_job_id
    page = client_page(slurm, job)
    assert "capacity" in page.lower()
    slurm.cli.run("scontrol", ["update", f"nodename={node}", "state=resume"])
    drive(slurm, lambda: capacity.refresh_from_db() or capacity.count == 2)
    assert (
        AuditEntry.objects.filter(
            event_type=AuditEvent.CAPACITY_CHANGED, queue_id=slurm.queue.pk, actor=None
        ).count()
        >= 2
    )


def test_a_failing_job_shows_its_exit_code(slurm: Any) -> None:
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["sh", "-c", "exit 3"])
    drive(slurm, lambda: state(job) == JobState.FAILED)
    run = SlurmRun.objects.get(job=job)
    assert run.slurm_state == "FAILED" and run.exit_code == 3
    failed = JobEvent.objects.get(job=job, type="failed")
    assert "exit code 3" in failed.message


def test_a_job_cancelled_behind_the_products_back_is_noticed(slurm: Any) -> None:
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["sleep", "120"])
    run = drive(slurm, lambda: (r := slurm_run(job)) and r.started_seen and r)
    slurm.cli.cancel(run.slurm_job_id)
    drive(slurm, lambda: state(job) == JobState.FAILED)
    failed = JobEvent.objects.get(job=job, type="failed")
    assert "outside the product" in failed.message


def test_a_run_slurm_no_longer_knows_is_reported_lost_and_requeued(slurm: Any) -> None:
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["sleep", "120"])
    run = drive(slurm, lambda: (r := slurm_run(job)) and r.started_seen and r)
    real_id = run.slurm_job_id
    # As if Slurm had forgotten the job: the id the product holds is known nowhere.
    SlurmRun.objects.filter(pk=run.pk).update(slurm_job_id=2_000_000_000)
    drive(slurm, lambda: "lost" in events(job))
    lost = JobEvent.objects.get(job=job, type="lost")
    assert "no longer knows" in lost.message
    job.refresh_from_db()
    assert job.counted_preemptions == 0
    slurm.cli.cancel(real_id)


class LosesAnswers(Cli):
    """The real sbatch, whose answer is lost on the way back (as after a timeout)."""

    def sbatch(self, script: str, options: Any, env: Any, **user: Any) -> int:
        super().sbatch(script, options, env, **user)
        raise SlurmUnreachable("sbatch did not answer within 5 s")


def test_a_submission_whose_answer_was_lost_is_found_by_name_not_duplicated(
    slurm: Any, slurm_jobs: Any
) -> None:
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["sleep", "30"])
    pass_.sync_queue(slurm.queue.pk, cli=LosesAnswers(conf=CONF, timeout=5), cycle=run_cycle)
    run = slurm_run(job)
    assert run is not None and run.slurm_job_id is None and run.state == SlurmRunState.SUBMITTING
    assert AuditEntry.objects.filter(event_type=AuditEvent.EXECUTOR_FAILED).exists()
    drive(slurm, lambda: (r := slurm_run(job)) and r.slurm_job_id)
    assert len(slurm_jobs(slurm)) == 1


def test_slurm_stopped_and_restarted_loses_nothing(slurm: Any) -> None:
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["sleep", "8"])
    run = drive(slurm, lambda: (r := slurm_run(job)) and r.started_seen and r)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_DIR": str(Path(CONF).parent)}
    subprocess.run([str(ROOT / "scripts/slurm/stop")], check=True, env=env, timeout=60)
    try:
        result = pass_.sync_queue(slurm.queue.pk, cli=Cli(conf=CONF, timeout=3), cycle=run_cycle)
        assert result.paused
        config = SlurmQueueConfig.objects.get(queue=slurm.queue)
        assert config.paused_since is not None
        assert state(job) == JobState.RUNNING
    finally:
        subprocess.run([str(ROOT / "scripts/slurm/start")], check=True, env=env, timeout=120)
    SlurmQueueConfig.objects.filter(queue=slurm.queue).update(retry_at=None)
    drive(slurm, lambda: state(job) == JobState.SUCCEEDED, timeout=40)
    run.refresh_from_db()
    assert run.slurm_state == "COMPLETED"
    assert SlurmRun.objects.filter(job=job).count() == 1
    assert AuditEntry.objects.filter(event_type=AuditEvent.EXECUTOR_RESUMED).exists()


def test_a_cancel_in_the_product_signals_then_cancels_the_slurm_job(slurm: Any) -> None:
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["sleep", "120"])
    run = drive(slurm, lambda: (r := slurm_run(job)) and r.started_seen and r)
    job_services.job_cancel(actor=slurm.owner_user, job=job.pk, reason="not needed")
    drive(slurm, lambda: "stopped" in events(job))
    run.refresh_from_db()
    assert run.state == SlurmRunState.ENDED and run.signalled_at is not None
    assert run.slurm_state in ("CANCELLED", "FAILED")  # the TERM may end it first
    assert state(job) == JobState.CANCELLED
    assert in_squeue(slurm, run.slurm_job_id)["job_state"] != "RUNNING"


def test_the_queue_page_says_since_when_slurm_is_unreachable(slurm: Any) -> None:
    from django.test import Client

    result = pass_.sync_queue(
        slurm.queue.pk, cli=Cli(conf="/nonexistent/slurm.conf", timeout=3), cycle=run_cycle
    )
    assert result.paused
    web = Client()
    web.force_login(slurm.admin)
    page = web.get(f"/queues/{slurm.queue.pk}/").content.decode()
    assert "executor paused" in page and "unreachable since" in page
    assert "Slurm unreachable since" in web.get(f"/queues/{slurm.queue.pk}/slurm/").content.decode()
    assert AuditEntry.objects.filter(event_type=AuditEvent.EXECUTOR_PAUSED).count() == 1


def test_a_job_slurm_keeps_refusing_fails_after_retries_with_backoff(slurm: Any) -> None:
    # The type keeps its capacity (gpu-a's nodes) but Slurm refuses the partition list.
    SlurmTypeConfig.objects.filter(queue=slurm.queue, instance_type__name=TYPE_A).update(
        partition="gpu-a,no-such-partition"
    )
    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["true"])
    drive(slurm, lambda: state(job) == JobState.FAILED, timeout=60)
    run = SlurmRun.objects.get(job=job)
    assert run.attempts == orders.MAX_SUBMIT_ATTEMPTS and run.slurm_job_id is None
    failures = AuditEntry.objects.filter(event_type=AuditEvent.EXECUTOR_FAILED)
    assert failures.count() == orders.MAX_SUBMIT_ATTEMPTS
    assert "Slurm refused the job" in JobEvent.objects.get(job=job, type="failed").message


def test_beats_slurm_sync_task_runs_the_pass_of_every_slurm_queue(slurm: Any) -> None:
    from scheduler import tasks

    job = submit(slurm, slurm.owner, slurm.owner_user, [(TYPE_A, 1)], ["sleep", "30"])
    tasks.slurm_sync.apply()
    run = slurm_run(job)
    assert run is not None and run.slurm_job_id is not None
    assert in_squeue(slurm, run.slurm_job_id) is not None
