"""The slurm executor's configuration, a job's program and the sbatch call built from them
(no Slurm needed: tests/slurm runs them against the local Slurm)."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from governance.models import AuditEntry, AuditEvent, SlurmTypeConfig
from governance.models.capacity import Executor
from governance.services import jobs as job_services
from governance.services import slurm as slurm_services
from governance.services.errors import Errors, PermissionDenied, ValidationFailed
from scheduler.executors.slurm import submit
from scheduler.executors.slurm.cli import (
    Finished,
    _finished_lines,
    exit_status,
    node_gpus,
    node_usable,
    requested_gpus,
    tres_gpus,
)
from tests.factories import TeamFactory, make_admin, make_member, make_queue, make_share

G5 = "ml.g5.xlarge"


def clean(value: Any) -> tuple[dict[str, Any], dict[str, list[str]]]:
    errors = Errors()
    out = slurm_services.clean_program(value, errors)
    try:
        errors.raise_if_any()
    except ValidationFailed as exc:
        return out, exc.errors
    return out, {}


def test_a_program_is_a_command_or_a_script_with_workdir_and_env() -> None:
    ok, errors = clean({"command": ["python", "train.py"], "workdir": "/w", "env": {"A": "1"}})
    assert not errors and ok == {
        "command": ["python", "train.py"],
        "workdir": "/w",
        "env": {"A": "1"},
    }
    assert clean({"script": "#!/bin/bash\necho hi\n"})[1] == {}
    for bad in (
        "python train.py",
        {"command": []},
        {"command": "python"},
        {"command": ["a"], "script": "#!/bin/sh"},
        {"script": "echo no shebang"},
        {"command": ["a\x00b"]},
        {"command": ["a"], "workdir": "relative"},
        {"command": ["a"], "env": {"1BAD": "x"}},
        {"command": ["a"], "env": {"GOV_RUN": "9"}},
        {"command": ["a"], "env": {"A": 5}},
        {"command": ["a"], "shell": True},
        {"command": ["x" * 5000]},
        {"script": "#!/bin/sh\n#SBATCH --gpus=8\nrun\n"},
        {"script": "#!/bin/sh\n#PBS -l nodes=4\nrun\n"},
        {"command": ["a"], "env": {"SBATCH_ARRAY_INX": "0-99"}},
        {"script": "#!/bin/sh\r\necho hi\r\n"},  # sbatch refuses DOS line breaks
        {"command": ["echo", "a\r\nb"]},
    ):
        assert "program" in clean(bad)[1], bad


def build(program: dict[str, Any], **options: Any) -> submit.Submission:
    """The sbatch call of run 1 of job 1 on gpu-a (one GPU each), ``options`` changed."""
    arguments: dict[str, Any] = {
        "name": "gov-1-r1",
        "job_id": 1,
        "run": 1,
        "count": 1,
        "mapping": submit.TypeMapping("gpu-a", "", 1, "gpu"),
        "account": "",
        "qos": "",
        "output_dir": "/out",
        "checkpoint_dir": "/ck/1",
        "resume_work": 0.0,
        "time_limit_seconds": None,
    }
    return submit.build(program=program, **(arguments | options))


def test_a_job_asks_slurm_for_nothing_beyond_what_the_product_admitted() -> None:
    # sbatch reads #SBATCH lines of the script as options (--array, --gres, --gpus...):
    # refused, as are SBATCH_ variables, sbatch's own settings, in a job's env.
    script = "#!/bin/bash\n# train\n#SBATCH --gpus-per-node=8\npython t.py\n"
    errors = clean({"script": script})[1]["program"]
    assert any("line 3 is a #SBATCH directive" in error for error in errors), errors
    errors = clean({"command": ["a"], "env": {"SBATCH_GRES": "gpu:8"}})[1]["program"]
    assert any("SBATCH_GRES" in error and "SBATCH_" in error for error in errors), errors
    # Comments sbatch does not read stay allowed.
    harmless = "#!/bin/sh\n# SBATCH is not read\n  #SBATCH indented: neither\necho\n"
    assert clean({"script": harmless})[1] == {}
    # Whatever a job holds (a job stored before these rules, a prefix another Slurm reads),
    # sbatch reads the product's wrapper: the same for every job but for its program's
    # path, which holds none of the job's text. The program is a file of its own; SBATCH_
    # and SLURM_ variables are dropped from the job's env.
    program = "#!/bin/sh\n#SBATCH --array=0-9\n#SLURM --exclusive\n#PBS -N x\necho\n"
    sub = build(
        {
            "script": program,
            "env": {"SBATCH_ARRAY_INX": "0-9", "SLURM_CONF": "/x", "A": "1"},
            "workdir": "/w\n#SBATCH --exclusive",
        }
    )
    assert sub.program == program and sub.program_path == "/out/gov-1-r1.program"
    assert sub.script == submit.WRAPPER.replace("{program}", "/out/gov-1-r1.program")
    assert "#SBATCH" not in sub.script and "--exclusive" not in sub.script
    assert sub.env["GOV_WORKDIR"] == "/w\n#SBATCH --exclusive"
    assert "SBATCH_ARRAY_INX" not in sub.env and "SLURM_CONF" not in sub.env
    assert sub.env["A"] == "1"
    assert "--ignore-pbs" in sub.options


def test_the_batch_script_quotes_every_argument() -> None:
    argv = ["echo", "$(rm -rf /)", "a b", "it's"]
    sub = build(
        {"command": argv, "env": {"X": "$HOME"}},
        name="gov-1-r2",
        run=2,
        count=3,
        mapping=submit.TypeMapping("gpu-a", "fa", 2, "gpu"),
        account="acct",
        qos="high",
        resume_work=30.0,
        time_limit_seconds=600,
    )
    assert sub.program.splitlines()[1] == f"exec {shlex.join(argv)}"
    assert shlex.split(sub.program.splitlines()[1])[1:] == argv
    for option in (
        "--job-name=gov-1-r2",
        "--no-requeue",
        "--ntasks=3",
        "--gpus-per-task=2",
        "--partition=gpu-a",
        "--constraint=fa",
        "--account=acct",
        "--qos=high",
        "--time=10",
    ):
        assert option in sub.options
    assert sub.env["X"] == "$HOME" and sub.env["GOV_RUN"] == "2"
    assert sub.env["GOV_CHECKPOINT_DIR"] == "/ck/1" and sub.env["GOV_RESUME_WORK"] == "30"


def test_slurm_answers_are_read() -> None:
    assert exit_status({"exit_code": 3 << 8}) == (3, None)
    assert exit_status({"exit_code": 9}) == (None, 9)
    assert exit_status({"exit_code": {"return_code": 2, "signal": {"id": 0}}}) == (2, 0)
    # sacct's "0:9" is signal 9, not exit code 0; "0:0" is exit code 0 and no signal.
    assert _finished_lines("12|FAILED|0:9\n12.batch|FAILED|0:9\n")[12] == Finished("FAILED", 0, 9)
    assert _finished_lines("13|COMPLETED|0:0\n")[13] == Finished("COMPLETED", 0, None)
    assert tres_gpus("cpu=2,mem=1G,node=1,billing=2,gres/gpu=4") == 4
    assert tres_gpus("cpu=2,gres/gpu:a100=2,gres/gpu:h100=1") == 3
    assert requested_gpus({"tres-per-task": "gres:gpu:2", "NumTasks": "3"}) == 6
    assert requested_gpus({"tres-per-node": "gres/gpu:4", "NumNodes": "2"}) == 8
    assert node_gpus({"gres": "gpu:a100:4(S:0-1),gpu:2"}, "gpu") == 6
    assert node_gpus({"gres": "mps:100"}, "gpu") == 0
    assert node_usable({"state": "idle", "state_flags": []})
    assert node_usable({"state": "mixed"})
    assert not node_usable({"state": "down"})
    assert not node_usable({"state": "idle", "state_flags": ["DRAIN"]})


@pytest.mark.django_db
def test_the_mapping_is_set_by_admins_validated_and_audited() -> None:
    queue = make_queue("s", {G5: 4})
    admin = make_admin()
    team = TeamFactory(name="t")
    with pytest.raises(PermissionDenied):
        slurm_services.slurm_config_set(actor=make_member(team), queue=queue, config={})
    with pytest.raises(ValidationFailed) as refused:
        slurm_services.slurm_config_set(
            actor=admin,
            queue=queue,
            config={
                "account": "bad name",
                "grace_seconds": -1,
                "types": {G5: {"gpus_per_instance": 2}, "nope": {"partition": "p"}},
            },
        )
    assert set(refused.value.errors) == {"account", "grace_seconds", "types"}
    assert any("partition or a feature" in m for m in refused.value.errors["types"])
    after = slurm_services.slurm_config_set(
        actor=admin,
        queue=queue,
        config={"account": "ml", "types": {G5: {"partition": "gpu-a", "gpus_per_instance": 4}}},
        reason="new cluster",
    )
    assert after["types"][G5] == {
        "partition": "gpu-a",
        "feature": "",
        "gpus_per_instance": 4,
        "gres_name": "gpu",
    }
    entry = AuditEntry.objects.get(event_type=AuditEvent.SLURM_CONFIG_CHANGED)
    assert entry.after["account"] == "ml" and entry.reason == "new cluster"
    slurm_services.slurm_config_set(actor=admin, queue=queue, config={"types": {}})
    assert not SlurmTypeConfig.objects.filter(queue=queue).exists()


@pytest.mark.django_db
def test_each_team_is_mapped_to_a_unix_user_of_its_own_never_root() -> None:
    queue = make_queue("s", {G5: 4})
    admin = make_admin()
    TeamFactory(name="a"), TeamFactory(name="b")
    for teams, message in (
        ({"a": {"user": "root"}}, "not root"),
        ({"a": {"user": "Bad User"}}, "Unix user name"),
        ({"a": {"user": "gov-a"}, "b": {"user": "gov-a"}}, "already runs the jobs of"),
        ({"nope": {"user": "gov-a"}}, "no such team"),
        ({"a": {"user": "gov-a", "qos": "bad qos"}}, "letters, digits"),
        ({"a": {"user": "gov-a", "shell": "x"}}, "unknown keys"),
    ):
        with pytest.raises(ValidationFailed) as refused:
            slurm_services.slurm_config_set(actor=admin, queue=queue, config={"teams": teams})
        assert any(message in m for m in refused.value.errors["teams"]), refused.value.errors
    with pytest.raises(ValidationFailed) as refused:
        slurm_services.slurm_config_set(
            actor=admin, queue=queue, config={"drift_report_only": "yes"}
        )
    assert "drift_report_only" in refused.value.errors
    after = slurm_services.slurm_config_set(
        actor=admin,
        queue=queue,
        config={
            "teams": {"a": {"user": "gov-a", "account": "acct-a"}, "b": {"user": "gov-b"}},
            "drift_report_only": True,
        },
    )
    assert after["teams"] == {
        "a": {"user": "gov-a", "account": "acct-a", "qos": ""},
        "b": {"user": "gov-b", "account": "", "qos": ""},
    }
    assert after["drift_report_only"] is True
    # Other changes keep the teams; a new map replaces them.
    assert (
        slurm_services.slurm_config_set(actor=admin, queue=queue, config={"grace_seconds": 3})[
            "teams"
        ]
        == after["teams"]
    )
    after = slurm_services.slurm_config_set(
        actor=admin, queue=queue, config={"teams": {"b": {"user": "gov-b"}}}
    )
    assert list(after["teams"]) == ["b"]
    entry = (
        AuditEntry.objects.filter(event_type=AuditEvent.SLURM_CONFIG_CHANGED).order_by("id").last()
    )
    assert entry is not None and list(entry.after["teams"]) == ["b"]
    response = APIClient()
    response.force_authenticate(admin)
    got = response.patch(
        f"/api/queues/{queue.pk}/slurm/",
        {"teams": {"a": {"user": "root"}}},
        format="json",
    )
    assert got.status_code == 400 and "teams" in got.json()


@pytest.mark.django_db
def test_a_job_of_a_slurm_queue_must_say_what_to_run() -> None:
    queue = make_queue("s", {G5: 4})
    queue.executor = Executor.SLURM
    queue.save()
    team = TeamFactory(name="t")
    share = make_share(queue, team, "s", {G5: 2})
    user = make_member(team)
    prefs = [{"instance_type": G5, "count": 1}]
    with pytest.raises(ValidationFailed) as refused:
        job_services.job_submit(actor=user, share=share, name="j", preferences=prefs)
    assert "program" in refused.value.errors
    job = job_services.job_submit(
        actor=user, share=share, name="j", preferences=prefs, program={"command": ["true"]}
    )
    assert job.program == {"command": ["true"]}


@pytest.mark.django_db
def test_the_api_and_the_page_show_and_change_the_mapping() -> None:
    queue = make_queue("s", {G5: 4})
    admin = make_admin()
    api = APIClient()
    api.force_authenticate(admin)
    url = f"/api/queues/{queue.pk}/slurm/"
    assert api.get(url).json()["paused_since"] is None
    bad = api.patch(url, {"types": {G5: {"partition": "a;b"}}}, format="json")
    assert bad.status_code == 400 and "types" in bad.json()
    good = api.patch(url, {"qos": "q1", "types": {G5: {"feature": "fa"}}}, format="json")
    assert good.status_code == 200, good.content
    assert good.json()["types"][G5]["feature"] == "fa" and good.json()["qos"] == "q1"

    web = Client()
    web.force_login(admin)
    page = web.get(f"/queues/{queue.pk}/slurm/")
    assert page.status_code == 200 and b"fa" in page.content
    form = {
        "account": "",
        "qos": "q2",
        "grace_seconds": "5",
        "t0_partition": "gpu-b",
        "t0_feature": "",
        "t0_gpus_per_instance": "2",
        "t0_gres_name": "gpu",
        "reason": "",
    }
    assert web.post(f"/queues/{queue.pk}/slurm/", form).status_code == 302
    assert api.get(url).json()["types"][G5]["partition"] == "gpu-b"
    refused = web.post(f"/queues/{queue.pk}/slurm/", {**form, "t0_partition": "no way"})
    assert refused.status_code == 400 and b"letters, digits" in refused.content
