"""What a team cannot escape, tried as an attacker would against the local Slurm
(docs/slurm.md#security-model): its jobs run as its own Unix user, get from Slurm only
what the product admitted, and what runs beyond it is caught by the drift guard. Also how
jobs end: by a signal, without their working directory, on a node going down."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from governance.models import (
    AuditEntry,
    AuditEvent,
    Job,
    JobEvent,
    JobState,
    Notification,
    QueueCapacity,
    SlurmDrift,
    SlurmQueueConfig,
    SlurmRun,
    SlurmTeamConfig,
)
from governance.services import jobs as job_services
from scheduler.cycle.run import run_cycle
from scheduler.executors.slurm import pass_
from scheduler.executors.slurm import submit as submit_module
from scheduler.executors.slurm.cli import Cli
from tests.slurm.conftest import CONF, TYPE_A, USER_A, USER_B, drive
from tests.slurm.test_slurm_executor import slurm_run, state

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def submit(share: Any, user: Any, count: int, program: dict[str, Any]) -> Job:
    return job_services.job_submit(
        actor=user,
        share=share,
        name="j",
        preferences=[{"instance_type": TYPE_A, "count": count}],
        program=program,
    )


def listed(world: Any, slurm_job_id: int) -> dict[str, Any] | None:
    """The job as the executor lists it (user, GPUs, nodes, array, exclusive...)."""
    return next((j for j in world.cli.jobs() if j["job_id"] == slurm_job_id), None)


def as_user(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command run as a team's Unix user, with the local Slurm's config."""
    env = {"PATH": os.environ["PATH"], "SLURM_CONF": CONF}
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def test_a_directive_smuggled_in_any_form_runs_exactly_as_admitted(
    slurm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sbatch's own settings in the product's environment (as an operator's shell may
    # hold them) reach no submission either.
    for name, value in (
        ("SBATCH_ARRAY_INX", "0-3"),
        ("SBATCH_EXCLUSIVE", "1"),
        ("SBATCH_GPUS", "8"),
        ("SLURM_GPUS", "8"),
        ("SLURM_EXCLUSIVE", "1"),
    ):
        monkeypatch.setenv(name, value)
    # Stored directly (a job from before the services refused directives, or a prefix
    # they do not know): every form a Slurm version may read as an option.
    script = (
        "#!/bin/sh\n"
        "#SBATCH --array=0-3\n"
        "#SLURM --exclusive\n"
        "#slurm --gpus=8\n"
        "# SBATCH --nodes=2\n"
        "#  SBATCH --ntasks=8\n"
        "#sbatch --exclusive\n"
        "#PBS -l nodes=2\n"
        "#BSUB -n 8\n"
        'echo "task=${SLURM_ARRAY_TASK_ID:-none} gpus=${SLURM_GPUS_ON_NODE:-?} '
        'nodes=$SLURM_JOB_NUM_NODES tasks=$SLURM_NTASKS cwd=$(pwd)"\n'
        "sleep 5\n"
    )
    job = submit(slurm.owner, slurm.owner_user, 1, {"command": ["true"]})
    job.program = {
        "script": script,
        "workdir": "/tmp",
        "env": {"SBATCH_ARRAY_INX": "0-3", "SBATCH_EXCLUSIVE": "1", "SLURM_GPUS": "8"},
    }
    job.save(update_fields=["program"])
    run = drive(slurm, lambda: (r := slurm_run(job)) and r.started_seen and r)
    seen = listed(slurm, run.slurm_job_id)
    assert seen is not None
    assert (seen["gpus"], seen["nodes"], seen["tasks"]) == (1, 1, 1)
    assert not seen["array"] and not seen["exclusive"]
    assert seen["user"] == USER_A
    # What sbatch read is the product's wrapper, nothing of the job's.
    batch = slurm.cli.run("scontrol", ["write", "batch_script", str(run.slurm_job_id), "-"])
    assert (
        batch.strip()
        == submit_module.WRAPPER.replace(
            "{program}", run.stdout.replace(f"-{run.slurm_job_id}.out", ".program")
        ).strip()
    )
    drive(slurm, lambda: state(job) == JobState.SUCCEEDED)
    assert [j["job_id"] for j in slurm.cli.jobs() if j["name"] == run.name] in (
        [],
        [run.slurm_job_id],
    )  # one job, no array tasks
    output = Path(run.stdout).read_text().strip()
    assert output == "task=none gpus=1 nodes=1 tasks=1 cwd=/tmp", output
    assert not SlurmDrift.objects.exists()


def test_each_team_runs_as_its_own_user_and_cannot_touch_another_teams_work(
    slurm: Any,
) -> None:
    victim = submit(
        slurm.owner,
        slurm.owner_user,
        1,
        {
            "command": [
                "sh",
                "-c",
                'echo "secret of team A"; echo 30 > "$GOV_CHECKPOINT_DIR/progress"; sleep 120',
            ]
        },
    )
    v_run = drive(slurm, lambda: (r := slurm_run(victim)) and r.started_seen and r)
    ckpt = Path(slurm.base, "ckpt", USER_A, str(victim.pk))
    out_dir = Path(v_run.stdout).parent
    for path in (out_dir, ckpt.parent, ckpt):
        found = path.stat()
        assert stat.S_IMODE(found.st_mode) == 0o700, path
        assert found.st_uid == identity_uid(USER_A), path
    hook_env = Path(CONF).parent / "hook.env"
    hook_env.write_text("SLURM_HOOK_TOKEN=never-read-by-a-team\n")
    hook_env.chmod(0o600)
    # Team B's job tries what the review did: read A's output, the hook's token and
    # Slurm's state, forge A's checkpoint, cancel A's job.
    attack = (
        "#!/bin/sh\n"
        "echo user=$(id -un)\n"
        'cat "$A_OUT" 2>/dev/null && echo READ-OUTPUT || echo output-refused\n'
        'cat "$HOOK" 2>/dev/null && echo READ-TOKEN || echo token-refused\n'
        'ls "$STATE" >/dev/null 2>&1 && echo LISTED-STATE || echo state-refused\n'
        '{ echo 999 > "$A_CKPT/progress"; } 2>/dev/null && echo WROTE-CKPT || echo ckpt-refused\n'
        'scancel "$A_JOB" 2>/dev/null && echo CANCELLED || echo cancel-refused\n'
    )
    attacker = submit(
        slurm.borrower,
        slurm.borrower_user,
        1,
        {
            "script": attack,
            "env": {
                "A_OUT": v_run.stdout,
                "HOOK": str(hook_env),
                "STATE": str(Path(CONF).parent / "state"),
                "A_CKPT": str(ckpt),
                "A_JOB": str(v_run.slurm_job_id),
            },
        },
    )
    drive(slurm, lambda: state(attacker) in (JobState.SUCCEEDED, JobState.FAILED))
    a_run = SlurmRun.objects.get(job=attacker)
    assert a_run.unix_user == USER_B
    said = Path(a_run.stdout).read_text().split()
    assert said == [
        f"user={USER_B}",
        "output-refused",
        "token-refused",
        "state-refused",
        "ckpt-refused",
        "cancel-refused",
    ], said
    # The same by hand, as team B's user: refused by the OS and by Slurm.
    assert as_user(USER_B, "cat", v_run.stdout).returncode != 0
    refused = as_user(USER_B, "scancel", str(v_run.slurm_job_id))
    assert refused.returncode != 0 or "denied" in (refused.stderr + refused.stdout).lower()
    # A's job runs on, its own checkpoint recorded, never the forged one.
    drive(slurm, lambda: victim.refresh_from_db() or victim.checkpoint_work > 0)
    assert state(victim) == JobState.RUNNING
    assert victim.checkpoint_work == 30
    assert (ckpt / "progress").read_text().strip() == "30"
    seen = listed(slurm, v_run.slurm_job_id)
    assert seen is not None and seen["job_state"] == "RUNNING" and seen["user"] == USER_A
    assert "secret of team A" in Path(v_run.stdout).read_text()


def identity_uid(user: str) -> int:
    from scheduler.executors.slurm import identity

    return identity.resolve(user).uid


def test_a_team_without_a_unix_user_runs_nothing(slurm: Any) -> None:
    SlurmTeamConfig.objects.filter(queue=slurm.queue, unix_user=USER_B).delete()
    job = submit(slurm.borrower, slurm.borrower_user, 1, {"command": ["true"]})
    drive(slurm, lambda: state(job) == JobState.FAILED)
    run = SlurmRun.objects.get(job=job)
    assert run.slurm_job_id is None
    failed = JobEvent.objects.get(job=job, type="failed")
    assert "no Unix user" in failed.message


def test_a_job_killed_by_a_signal_is_recorded_with_it_never_as_exit_0(slurm: Any) -> None:
    job = submit(slurm.owner, slurm.owner_user, 1, {"command": ["sh", "-c", "kill -9 $$"]})
    drive(slurm, lambda: state(job) == JobState.FAILED)
    run = SlurmRun.objects.get(job=job)
    assert run.signal == 9 and run.exit_code is None, (run.slurm_state, run.exit_code)
    failed = JobEvent.objects.get(job=job, type="failed")
    assert "signal 9 (SIGKILL)" in failed.message and "exit code 0" not in failed.message
    web = Client()
    web.force_login(slurm.admin)
    assert "signal 9" in web.get(f"/jobs/{job.pk}/").content.decode()


def test_a_missing_working_directory_is_refused_at_submission(slurm: Any) -> None:
    job = submit(slurm.owner, slurm.owner_user, 1, {"command": ["pwd"], "workdir": "/no/such/dir"})
    drive(slurm, lambda: state(job) == JobState.FAILED)
    run = SlurmRun.objects.get(job=job)
    assert run.slurm_job_id is None  # never reached Slurm
    failed = JobEvent.objects.get(job=job, type="failed")
    assert "working directory /no/such/dir does not exist" in failed.message


def test_a_working_directory_missing_on_the_node_fails_the_run_saying_so(
    slurm: Any, settings: Any
) -> None:
    settings.SLURM_CHECK_WORKDIR = False  # as when the product's host cannot see the nodes'
    job = submit(slurm.owner, slurm.owner_user, 1, {"command": ["pwd"], "workdir": "/no/such/dir"})
    drive(slurm, lambda: state(job) == JobState.FAILED)
    run = SlurmRun.objects.get(job=job)
    assert run.slurm_job_id is not None and run.exit_code == submit_module.WORKDIR_EXIT
    failed = JobEvent.objects.get(job=job, type="failed")
    assert "working directory does not exist" in failed.message
    assert "/no/such/dir does not exist" in Path(run.stdout).read_text()
    assert not Path("/tmp", "pwd").exists()


class StaleNodes(Cli):
    """The real Slurm, but the node list read with the queue predates a node's failure
    (it went down between the two reads of one pass)."""

    stale: list[dict[str, Any]] | None = None

    def sinfo_nodes(self) -> list[dict[str, Any]]:
        if self.stale is not None:
            nodes, self.stale = self.stale, None
            return nodes
        return super().sinfo_nodes()


def test_a_node_going_down_mid_pass_is_applied_before_anything_is_admitted(
    slurm: Any,
) -> None:
    # Team B fills gpu-a (two nodes of four GPUs), one GPU a job.
    running = [
        submit(slurm.borrower, slurm.borrower_user, 1, {"command": ["sleep", "120"]})
        for _ in range(8)
    ]
    drive(slurm, lambda: all((r := slurm_run(j)) and r.started_seen for j in running))
    cli = StaleNodes(conf=CONF, timeout=5)
    cli.stale = cli.sinfo_nodes()  # both nodes up
    first = slurm_run(running[0])
    assert first is not None
    node = _node_of(slurm, first)
    lost = [r for j in running if (r := slurm_run(j)) is not None and _node_of(slurm, r) == node]
    assert len(lost) == 4
    slurm.cli.run("scontrol", ["update", f"nodename={node}", "state=down", "reason=test"])
    _wait_node_fail(slurm, [r.slurm_job_id for r in lost])
    result = pass_.sync_queue(slurm.queue.pk, cli=cli, cycle=run_cycle)
    assert result.nodes_lost
    capacity = QueueCapacity.objects.get(queue=slurm.queue, instance_type__name=TYPE_A)
    assert capacity.count == 4
    # Nothing admitted on the capacity that went: the four that lost their node wait
    # again, none of them submitted to Slurm again in that pass.
    assert result.lost == 4 and result.submitted == 0, result
    assert sum(state(j) == JobState.PENDING for j in running) == 4
    held = sum(
        int(j.preferences[j.preference or 0]["count"])
        for j in Job.objects.filter(queue=slurm.queue, state=JobState.RUNNING)
    )
    assert held <= 4


def _node_of(world: Any, run: SlurmRun) -> str:
    return world.cli.run("squeue", ["-h", "-o", "%N", "-j", str(run.slurm_job_id)]).strip()


def _wait_node_fail(world: Any, ids: list[int]) -> None:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = {j["job_id"]: j["job_state"] for j in world.cli.jobs()}
        if all(states.get(i, "NODE_FAIL") not in ("RUNNING", "COMPLETING") for i in ids):
            return
        time.sleep(0.2)
    raise AssertionError("the jobs of the node set down did not end")


def _foreign(user: str, *options: str) -> int:
    """A job a team's user submits to a governed partition behind the product's back."""
    done = as_user(
        user, "sbatch", "--parsable", "--output=/dev/null", *options, "--wrap", "sleep 120"
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().split(";")[0])


def test_a_job_the_product_did_not_submit_is_caught_audited_and_cancelled(slurm: Any) -> None:
    sid = _foreign(USER_B, "--partition=gpu-a", "--gpus=4", "--job-name=mine")
    _wait_running(slurm, sid)
    result = pass_.sync_queue(slurm.queue.pk, cli=slurm.cli, cycle=run_cycle)
    assert result.drift == [sid] and result.drift_cancels == [sid]
    drift = SlurmDrift.objects.get(queue=slurm.queue, slurm_job_id=sid)
    assert drift.kinds == "unknown" and drift.user == USER_B and drift.action == "cancelled"
    entry = AuditEntry.objects.get(event_type=AuditEvent.EXECUTOR_DRIFT)
    assert entry.actor is None and entry.after["slurm_job_id"] == sid
    assert entry.after["gpus"] == 4 and entry.after["found"] == ["unknown"]
    assert Notification.objects.filter(recipient=slurm.admin, kind="slurm_drift").exists()
    seen = listed(slurm, sid)
    assert seen is None or seen["job_state"] in ("CANCELLED", "COMPLETING")
    # Once, not every pass; shown on the queue's Slurm page.
    pass_.sync_queue(slurm.queue.pk, cli=slurm.cli, cycle=run_cycle)
    assert AuditEntry.objects.filter(event_type=AuditEvent.EXECUTOR_DRIFT).count() == 1
    web = Client()
    web.force_login(slurm.admin)
    page = web.get(f"/queues/{slurm.queue.pk}/slurm/").content.decode()
    assert str(sid) in page and USER_B in page and "cancelled" in page


def test_an_array_submitted_behind_the_products_back_is_caught_in_one_pass(slurm: Any) -> None:
    sid = _foreign(USER_A, "--partition=gpu-b", "--gpus=1", "--array=0-3", "--job-name=sweep")
    result = pass_.sync_queue(slurm.queue.pk, cli=slurm.cli, cycle=run_cycle)
    tasks = [j for j in slurm.cli.jobs() if j["name"] == "sweep" and j["user"] == USER_A]
    assert tasks and all(j["array"] for j in tasks)
    assert {j["job_id"] for j in tasks} <= set(result.drift) | {sid}
    found = SlurmDrift.objects.filter(queue=slurm.queue, user=USER_A)
    assert found.exists() and all(d.details["array"] for d in found)
    assert all(
        (seen := listed(slurm, j["job_id"])) is None
        or seen["job_state"] in ("CANCELLED", "COMPLETING")
        for j in tasks
    )


def test_a_reported_job_holding_gpus_is_capacity_the_product_never_double_books(
    slurm: Any,
) -> None:
    SlurmQueueConfig.objects.filter(queue=slurm.queue).update(drift_report_only=True)
    sid = _foreign(USER_B, "--partition=gpu-a", "--gpus=4", "--job-name=mine")
    _wait_running(slurm, sid)
    job = submit(slurm.owner, slurm.owner_user, 8, {"command": ["sleep", "60"]})
    result = pass_.sync_queue(slurm.queue.pk, cli=slurm.cli, cycle=run_cycle)
    assert result.drift == [sid] and result.drift_cancels == []
    assert QueueCapacity.objects.get(queue=slurm.queue, instance_type__name=TYPE_A).count == 4
    assert state(job) == JobState.PENDING and result.submitted == 0
    assert listed(slurm, sid)["job_state"] == "RUNNING"  # reported only
    assert SlurmDrift.objects.get(slurm_job_id=sid).action == "reported"
    small = submit(slurm.owner, slurm.owner_user, 4, {"command": ["sleep", "60"]})
    run = drive(slurm, lambda: (r := slurm_run(small)) and r.started_seen and r)
    assert listed(slurm, run.slurm_job_id)["job_state"] == "RUNNING"
    assert state(job) == JobState.PENDING
    slurm.cli.cancel(sid)
    drive(
        slurm,
        lambda: QueueCapacity.objects.get(queue=slurm.queue, instance_type__name=TYPE_A).count == 8,
    )
    assert SlurmDrift.objects.get(slurm_job_id=sid).gone_at is not None


def test_a_product_job_changed_beyond_its_admission_is_caught_and_cancelled(
    slurm: Any,
) -> None:
    # Team A's job waits in Slurm behind a reservation; its user makes it ask for more.
    slurm.cli.run(
        "scontrol",
        [
            "create",
            "reservation",
            f"reservationname={slurm.prefix}",
            "nodes=sa1,sa2",
            "users=root",
            "starttime=now",
            "duration=10",
            "flags=ignore_jobs",
        ],
    )
    try:
        job = submit(slurm.owner, slurm.owner_user, 1, {"command": ["sleep", "60"]})
        run = drive(slurm, lambda: (r := slurm_run(job)) and r.slurm_job_id and r)
        job_id = f"jobid={run.slurm_job_id}"
        for change in ("NumTasks=4", "NumNodes=2"):
            changed = as_user(USER_A, "scontrol", "update", job_id, change)
            assert changed.returncode == 0, (change, changed.stderr)
        # Exclusive nodes only an administrator may give (Slurm refuses the team's user).
        assert as_user(USER_A, "scontrol", "update", job_id, "OverSubscribe=NO").returncode
        slurm.cli.run("scontrol", ["update", job_id, "OverSubscribe=NO"])
        seen = listed(slurm, run.slurm_job_id)
        assert seen is not None and (seen["gpus"], seen["nodes"], seen["exclusive"]) == (
            4,
            2,
            True,
        )
        result = pass_.sync_queue(slurm.queue.pk, cli=slurm.cli, cycle=run_cycle)
    finally:
        slurm.cli.run("scontrol", ["delete", f"reservationname={slurm.prefix}"])
    assert result.drift == [run.slurm_job_id]
    drift = SlurmDrift.objects.get(slurm_job_id=run.slurm_job_id)
    assert drift.kinds == "gpus,nodes,exclusive" and drift.run_id == run.pk
    assert state(job) == JobState.FAILED
    failed = JobEvent.objects.get(job=job, type="failed")
    assert "drift guard" in failed.message
    seen = listed(slurm, run.slurm_job_id)
    assert seen is None or seen["job_state"] == "CANCELLED"


def _wait_running(world: Any, sid: int) -> None:
    import time

    deadline = time.monotonic() + 30
    while (seen := listed(world, sid)) is None or seen["job_state"] != "RUNNING":
        if time.monotonic() > deadline:
            raise AssertionError(f"Slurm job {sid} did not start: {seen}")
        time.sleep(0.2)
