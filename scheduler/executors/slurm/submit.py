"""A product run as an ``sbatch`` call: options, batch script and environment.

The batch script ``sbatch`` reads is the product's own wrapper (``WRAPPER``): constant
text but for the path of the job's program, so nothing a job holds can add an option to
``sbatch``, whatever directive prefix a Slurm version reads (``#SBATCH``, ``#SLURM``,
``#PBS``...). The options are the product's, on sbatch's command line. The wrapper runs
the job's program, kept in a file of its own (``Submission.program``, written by the
executor into the team's directory): a job's ``script`` as it is, a ``command`` (an argv
list) as ``exec`` of it quoted with ``shlex.join``. Every value the executor passes (job
id, run, working and checkpoint directories, resume point, the job's own env) becomes the
job's environment through a file handed to ``sbatch`` (``Cli.sbatch``), never as text a
shell would parse, nor as the environment of ``sbatch`` itself (docs/slurm.md#security-model).
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
# The wrapper's exit code when the job's working directory cannot be entered on its node.
WORKDIR_EXIT = 213
# The batch script of every submission: only the program's path is filled in (a path the
# executor makes: letters, digits, '/', '-', '_' and '.'). The working directory comes
# from the environment: a job's text never reaches the script sbatch reads.
WRAPPER = f"""#!/bin/sh
# Written by the product (docs/slurm.md#security-model): sbatch reads this script only;
# it runs the job's program, kept in a file of its own.
cd "$GOV_WORKDIR" 2>/dev/null || {{
  echo "gov: the working directory $GOV_WORKDIR does not exist or cannot be entered" >&2
  exit {WORKDIR_EXIT}
}}
exec {{program}}
"""
SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./\-]+$")


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
    script: str  # the wrapper, what sbatch reads
    program: str  # the job's program, for the file at ``program_path``
    program_path: str
    workdir: str
    options: list[str]
    env: dict[str, str]
    stdout: str
    uid: int | None = None  # the user the job runs as (sbatch --uid), set by the executor
    gid: int | None = None


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
    user_env: dict[str, str] | None = None,
) -> Submission:
    """The sbatch call for ``count`` instances: one task per instance, each with the
    type's GPUs, in its partition and/or with its node feature, never requeued by Slurm.
    ``output_dir`` (the team's) holds the job's output and its program's file;
    ``user_env`` (``USER``, ``HOME``...) describes the user the job runs as."""
    workdir = program.get("workdir") or output_dir
    stdout = os.path.join(output_dir, f"{name}-%j.out")
    program_path = os.path.join(output_dir, f"{name}.program")
    if not SAFE_PATH.match(program_path):
        raise ValueError(f"the program's path {program_path!r} holds characters out of [-_./]")
    options = [
        f"--job-name={name}",
        "--no-requeue",
        "--ignore-pbs",
        f"--ntasks={count}",
        "--cpus-per-task=1",
        f"--chdir={output_dir}",
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
        text = program["script"]
    else:
        command = program.get("command") or ["true"]
        text = "#!/bin/sh\n" + f"exec {shlex.join(command)}\n"
    own = program.get("env", {})
    env = {
        **(user_env or {}),
        **{key: value for key, value in own.items() if not key.startswith(RESERVED_ENV_PREFIXES)},
        "GOV_JOB_ID": str(job_id),
        "GOV_RUN": str(run),
        "GOV_WORKDIR": workdir,
        "GOV_CHECKPOINT_DIR": checkpoint_dir,
        "GOV_RESUME_WORK": f"{resume_work:g}",
    }
    return Submission(
        name=name,
        script=WRAPPER.replace("{program}", program_path),
        program=text,
        program_path=program_path,
        workdir=workdir,
        options=options,
        env=env,
        stdout=stdout,
    )
