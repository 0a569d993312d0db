"""The local Slurm of ``scripts/slurm/start``, for integration tests against the real thing.

Every test skips, saying why, when that Slurm is not running. Each test gets its own job
name prefix (so runs of earlier tests, which Slurm remembers for minutes, are never
mistaken for its own) and cancels its Slurm jobs and resumes every node when it ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from governance.models import Policy, SlurmQueueConfig, SlurmTeamConfig, SlurmTypeConfig
from governance.models.capacity import Executor
from scheduler.cycle.run import run_cycle
from scheduler.executors.slurm import identity, pass_
from scheduler.executors.slurm.cli import Cli, SlurmError
from tests.factories import (
    InstanceTypeFactory,
    TeamFactory,
    make_admin,
    make_member,
    make_queue,
    make_share,
)

ROOT = Path(__file__).resolve().parents[2]
CONF = os.environ.get("SLURM_CONF") or str(ROOT / "var" / "slurm" / "slurm.conf")
NODES = ("sa1", "sa2", "sb1", "sb2")
TYPE_A = "ml.g5.12xlarge"  # partition gpu-a, one GPU per instance: 8 instances
TYPE_B = "ml.g5.48xlarge"  # partition gpu-b, one GPU per instance: 8 instances
# The Unix users scripts/slurm/start creates for the tests' two teams.
USER_A, USER_B = "gov-team-a", "gov-team-b"


def _reachable() -> str:
    if not Path(CONF).exists():
        return f"no Slurm config at {CONF}: start the local Slurm with scripts/slurm/start"
    try:
        Cli(conf=CONF, timeout=5).sinfo_nodes()
    except SlurmError as exc:
        return f"the local Slurm does not answer ({exc}): start it with scripts/slurm/start"
    return ""


@pytest.fixture(scope="session")
def slurm_cli() -> Cli:
    why = _reachable()
    if why:
        pytest.skip(why)
    return Cli(conf=CONF, timeout=5)


@pytest.fixture
def slurm_env(slurm_cli: Cli, settings: Any, db: None) -> Iterator[Any]:
    """The executor's settings for one test: its own job name prefix and directories (in
    a directory the teams' users may traverse, as the data folder is); its Slurm jobs
    cancelled and every node resumed at the end."""
    for user in (USER_A, USER_B):
        try:
            identity.resolve(user)
        except identity.IdentityError as exc:
            pytest.skip(f"{exc}: scripts/slurm/start creates the tests' team users (as root)")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    base = Path(tempfile.mkdtemp(prefix="gov-slurm-test-"))
    base.chmod(0o711)
    settings.SLURM_CONF = CONF
    settings.SLURM_JOB_PREFIX = prefix
    settings.SLURM_OUTPUT_DIR = str(base / "out")
    settings.SLURM_CHECKPOINT_DIR = str(base / "ckpt")
    _resume_nodes(slurm_cli)  # a previous test or run may have left one down
    try:
        yield SimpleNamespace(cli=slurm_cli, prefix=prefix, base=base)
    finally:
        for job in _jobs(slurm_cli, prefix):
            with contextlib.suppress(SlurmError):
                slurm_cli.cancel(int(job["job_id"]))
        _resume_nodes(slurm_cli)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def slurm(slurm_env: Any) -> Any:
    """A queue run by the local Slurm: two types (one per partition), two teams' shares."""
    queue = make_queue("slurm", {TYPE_A: 8, TYPE_B: 8})
    queue.executor = Executor.SLURM
    queue.save()
    InstanceTypeFactory(name=TYPE_B)
    SlurmQueueConfig.objects.create(queue=queue, grace_seconds=1)
    for name, partition in ((TYPE_A, "gpu-a"), (TYPE_B, "gpu-b")):
        SlurmTypeConfig.objects.create(
            queue=queue,
            instance_type=InstanceTypeFactory(name=name),
            partition=partition,
            gpus_per_instance=1,
        )
    owner_team, borrower_team = TeamFactory(name="owners"), TeamFactory(name="borrowers")
    SlurmTeamConfig.objects.create(queue=queue, team=owner_team, unix_user=USER_A)
    SlurmTeamConfig.objects.create(queue=queue, team=borrower_team, unix_user=USER_B)
    owner = make_share(queue, owner_team, "owners", {TYPE_A: 4, TYPE_B: 4}, policy=Policy.LEND)
    borrower = make_share(
        queue,
        borrower_team,
        "borrowers",
        {TYPE_A: 4, TYPE_B: 4},
        policy=Policy.LEND_AND_BORROW,
        borrow_limit=-1,
    )
    return SimpleNamespace(
        queue=queue,
        cli=slurm_env.cli,
        prefix=slurm_env.prefix,
        base=slurm_env.base,
        owner=owner,
        borrower=borrower,
        owner_user=make_member(owner_team, "owner_user"),
        borrower_user=make_member(borrower_team, "borrower_user"),
        admin=make_admin("admin"),
    )


def _resume_nodes(cli: Cli) -> None:
    for node in NODES:
        if _node_state(cli, node) not in ("idle", "allocated", "mixed"):
            with contextlib.suppress(SlurmError):
                cli.run("scontrol", ["update", f"nodename={node}", "state=resume"])


def _node_state(cli: Cli, node: str) -> str:
    for entry in cli.sinfo_nodes():
        if entry.get("name") == node:
            return str(entry.get("state", "")).lower()
    return ""


def _jobs(cli: Cli, prefix: str) -> list[dict[str, Any]]:
    return [j for j in cli.squeue() if str(j.get("name", "")).startswith(f"{prefix}-")]


def drive(
    world: Any, until: Callable[[], Any], *, timeout: float = 30.0, cli: Cli | None = None
) -> Any:
    """Run the executor's passes until ``until()`` is true (or fail after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        pass_.sync_queue(world.queue.pk, cli=cli or world.cli, cycle=run_cycle)
        value = until()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {until.__doc__ or until}")
        time.sleep(0.2)


@pytest.fixture
def slurm_jobs() -> Callable[[Any], list[dict[str, Any]]]:
    """The test's own Slurm jobs, as squeue --json shows them."""
    return lambda world: _jobs(world.cli, world.prefix)
