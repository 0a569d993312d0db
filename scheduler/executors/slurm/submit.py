"""A product run as an ``sbatch`` call: options, batch script and environment.

Nothing reaches a shell unquoted: a job's ``command`` (an argv list) is written into the
batch script with ``shlex.join``; a job's ``script`` is the batch script itself, which
Slurm runs; every value the executor passes (job id, run, checkpoint directory, resume
point, the job's own env) becomes the job's environment through a file handed to
``sbatch`` (``Cli.sbatch``), never as text that a shell would parse, nor as the
environment of ``sbatch`` itself.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

# What a job's own env may not set (the services refuse it; a job stored before they did is
# filtered here): the executor's variables, Slurm's, and sbatch's own settings.
RESERVED_ENV_PREFIXES = ("GOV_", "SLURM_", "SBATCH_")
# A scheduler directive at the start of a line; the services refuse scripts with one, and a
# script stored before they did has each turned into a plain comment ("# SBATCH ...").
DIRECTIVE = re.compile(r"^#(?=SBATCH|PBS|BSUB)", re.MULTILINE)


@dataclass(frozen=True)
class TypeMapping:
    """How Slurm expresses one instance type (``SlurmTypeConfig``)."""

    partition: str
    feature: str
    gpus_per_instance: int
    gres_name: str


@dataclass(frozen=True)
class Submission:
    name: str
    script: str
    options: list[str]
    env: dict[str, str]
    stdout: str


def job_name(prefix: str, job_id: int, run: int) -> str:
    """The Slurm job name of a run: found again by it when sbatch's answer is lost."""
    return f"{prefix}-{job_id}-r{run}"


def build(
    *,
    name: str,
    job_id: int,
    run: int,
    count: int,
    mapping: TypeMapping,
    program: dict[str, Any],
    account: str,
    qos: str,
    output_dir: str,
    checkpoint_dir: str,
    resume_work: float,
    time_limit_seconds: float | None,
) -> Submission:
    """The sbatch call for ``count`` instances: one task per instance, each with the
    type's GPUs, in its partition and/or with its node feature, never requeued by Slurm."""
    workdir = program.get("workdir") or output_dir
    stdout = os.path.join(output_dir, f"{name}-%j.out")
    options = [
        f"--job-name={name}",
        "--no-requeue",
        "--ignore-pbs",
        f"--ntasks={count}",
        "--cpus-per-task=1",
        f"--chdir={workdir}",
        f"--output={stdout}",
    ]
    if mapping.gpus_per_instance > 0 and mapping.gres_name == "gpu":
        options.append(f"--gpus-per-task={mapping.gpus_per_instance}")
    elif mapping.gpus_per_instance > 0:
        # Another generic resource: one instance per node, its gres on each.
        options += [
            f"--nodes={count}",
            "--ntasks-per-node=1",
            f"--gres={mapping.gres_name}:{mapping.gpus_per_instance}",
        ]
    if mapping.partition:
        options.append(f"--partition={mapping.partition}")
    if mapping.feature:
        options.append(f"--constraint={mapping.feature}")
    if account:
        options.append(f"--account={account}")
    if qos:
        options.append(f"--qos={qos}")
    if time_limit_seconds is not None:
        options.append(f"--time={max(1, math.ceil(time_limit_seconds / 60))}")
    if "script" in program:
        script = DIRECTIVE.sub("# ", program["script"])
    else:
        command = program.get("command") or ["true"]
        script = "#!/bin/sh\n" + f"exec {shlex.join(command)}\n"
    own = program.get("env", {})
    env = {
        **{key: value for key, value in own.items() if not key.startswith(RESERVED_ENV_PREFIXES)},
        "GOV_JOB_ID": str(job_id),
        "GOV_RUN": str(run),
        "GOV_CHECKPOINT_DIR": checkpoint_dir,
        "GOV_RESUME_WORK": f"{resume_work:g}",
    }
    return Submission(name=name, script=script, options=options, env=env, stdout=stdout)
