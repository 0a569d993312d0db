"""Slurm's command-line tools, driven without a shell.

pyslurm does not build against Debian's Slurm, so the executor runs ``sbatch``,
``squeue``, ``sacct``, ``sinfo`` and ``scancel``: argv lists (never a shell), a timeout on
every call, JSON where Slurm offers it. Nothing here knows Django, so it can be tested
and benchmarked on its own. ``SlurmUnreachable`` means the controller did not answer (the
executor pauses); ``SlurmError`` that it answered with a refusal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# States after which a Slurm job runs no more (squeue's ``job_state``, sacct's ``State``).
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "CANCELLED",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
# Node states in which a node supplies no capacity (sinfo's ``state`` and ``state_flags``).
UNUSABLE_NODE = frozenset(
    {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "UNKNOWN"}
)
UNREACHABLE_HINTS = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "communication connection failure",
    "zero bytes were transmitted",
    "slurm_load",
)


# What ``sbatch``, and every job the product submits, keeps of the product's own
# environment: what programs and Slurm's client need (and the ``LC_*`` variables), nothing
# else. The product's environment holds its secrets (the database URL, SECRET_KEY, the hook
# token): a job must never see them, and no SBATCH_* setting there changes a submission.
SUBMIT_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "SLURM_CONF",
)


def submit_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a submission passes on (``SUBMIT_ENV``)."""
    return {
        key: value for key, value in environ.items() if key in SUBMIT_ENV or key.startswith("LC_")
    }


# scancel's answers for a job that already ended (or was purged): nothing left to stop.
ALREADY_GONE = ("already completing or completed", "invalid job id")


class SlurmError(Exception):
    """A Slurm command answered with an error (its stderr is the message)."""


class SlurmUnreachable(SlurmError):
    """The controller could not be reached or did not answer in time."""


# squeue -O fields of ``Cli.jobs``: "|" after each, no width (nothing is cut short); the
# name last, as it may hold the separator.
QUEUE_FIELDS = (
    "JobID",
    "State",
    "Partition",
    "exit_code",
    "UserName",
    "NumNodes",
    "tres-alloc",
    "tres-per-job",
    "tres-per-node",
    "tres-per-task",
    "NumTasks",
    "ArrayTaskID",
    "OverSubscribe",
    "Name",
)
QUEUE_FORMAT = ",".join(f"{name}:|" for name in QUEUE_FIELDS[:-1]) + f",{QUEUE_FIELDS[-1]}:"


@dataclass(frozen=True)
class Finished:
    """A finished job from the completion log: its state and exit code."""

    state: str
    exit_code: int | None
    signal: int | None


@dataclass
class Cli:
    """The client tools of one cluster: ``conf`` is its slurm.conf (SLURM_CONF)."""

    conf: str = ""
    timeout: float = 5.0
    bin_dir: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def _argv(self, tool: str, args: Sequence[str]) -> list[str]:
        return [os.path.join(self.bin_dir, tool) if self.bin_dir else tool, *args]

    def _env(self, *, submit: bool = False) -> dict[str, str]:
        env = submit_env(os.environ) if submit else dict(os.environ)
        env.update(self.env)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(
        self,
        tool: str,
        args: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        submit: bool = False,
        pass_fds: Sequence[int] = (),
    ) -> str:
        """Run one tool; its stdout, or SlurmError/SlurmUnreachable. With ``submit`` the
        tool gets only ``SUBMIT_ENV`` of this process's environment."""
        argv = self._argv(tool, args)
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout or self.timeout,
                env=self._env(submit=submit),
                pass_fds=tuple(pass_fds),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnreachable(f"{tool} did not answer within {exc.timeout:g} s") from exc
        except OSError as exc:
            raise SlurmUnreachable(f"{tool} could not be run: {exc}") from exc
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip()[:2000] or f"exit {done.returncode}"
            if any(hint in message.lower() for hint in UNREACHABLE_HINTS):
                raise SlurmUnreachable(f"{tool}: {message}")
            raise SlurmError(f"{tool}: {message}")
        return done.stdout

    def sbatch(
        self,
        script: str,
        options: Sequence[str],
        env: Mapping[str, str],
        *,
        uid: int | None = None,
        gid: int | None = None,
    ) -> int:
        """Submit a batch script (on stdin) with ``--parsable``; the Slurm job id. With
        ``uid`` and ``gid`` the job is the user's and runs as that user (``--uid``,
        ``--gid``: the product runs as root or as Slurm's SlurmUser).

        The job's environment is ``SUBMIT_ENV`` of this process's environment and ``env``,
        nothing else, handed to sbatch in a file (``--export-file``, NUL-separated, so any
        value passes as it is). Never as sbatch's own environment: there a job's variables
        (PATH, LD_PRELOAD...) would change what runs on this host as the product's user."""
        job_env = {**self._env(submit=True), **env}
        if any("\0" in k or "=" in k or "\0" in v for k, v in job_env.items()):
            raise SlurmError("a job's environment cannot hold NUL characters or '=' in names")
        with tempfile.TemporaryFile() as handle:
            for key, value in job_env.items():
                handle.write(f"{key}={value}".encode(errors="replace") + b"\0")
            handle.flush()
            handle.seek(0)
            fd = handle.fileno()
            out = self.run(
                "sbatch",
                [
                    "--parsable",
                    f"--export-file={fd}",
                    *([f"--uid={uid}", f"--gid={gid}"] if uid is not None else []),
                    *options,
                ],
                stdin=script,
                submit=True,
                pass_fds=(fd,),
            )
        match = re.match(r"\s*(\d+)", out)
        if not match:
            raise SlurmError(f"sbatch answered {out.strip()[:200]!r}, not a job id")
        return int(match.group(1))

    def jobs(self, partitions: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The jobs the controller knows, of every user, in every state (of ``partitions``
        when given), with the fields a pass needs: ``job_id``, ``job_state``,
        ``partition``, ``exit_code`` (the raw wait status, as ``--json`` gives it),
        ``user``, ``nodes``, ``gpus`` (given or asked for), ``tasks``, ``array`` (an array
        task), ``exclusive`` and ``name``. Every user's: the product's jobs run as the
        teams' users (docs/slurm.md#security-model), and the drift guard looks at the
        jobs it did not submit. Text output: on a controller holding a few hundred jobs
        ``squeue --json`` takes about ten times as long."""
        args = ["-h", "-a", "-t", "all", "-O", QUEUE_FORMAT]
        if partitions:
            args.append(f"--partition={','.join(partitions)}")
        out = self.run("squeue", args)
        found = []
        width = len(QUEUE_FIELDS)
        for line in out.splitlines():
            parts = line.split("|", width - 1)
            if len(parts) < width or not parts[0].strip().isdecimal():
                continue
            row = dict(zip(QUEUE_FIELDS, (p.strip() for p in parts[:-1]), strict=False))
            code = row["exit_code"]
            alloc = row["tres-alloc"] if row["tres-alloc"] not in ("(null)", "N/A") else ""
            found.append(
                {
                    "job_id": int(parts[0]),
                    "job_state": row["State"],
                    "partition": row["Partition"],
                    "exit_code": int(code) if code.isdecimal() else None,
                    "user": row["UserName"],
                    "nodes": int(row["NumNodes"]) if row["NumNodes"].isdecimal() else 0,
                    "tasks": int(row["NumTasks"]) if row["NumTasks"].isdecimal() else 0,
                    # What it was given, when Slurm accounts GPUs as a TRES; else what it
                    # asked for (which Slurm gives in full, or not at all).
                    "gpus": max(tres_gpus(alloc), requested_gpus(row)),
                    "array": row["ArrayTaskID"] not in ("", "N/A"),
                    "exclusive": row["OverSubscribe"].upper() == "NO",
                    "name": parts[-1],
                }
            )
        return found

    def squeue(self) -> list[dict[str, Any]]:
        """Every job the controller knows, with every detail (``squeue --json`` ignores
        -j/-t: filter here)."""
        data = json.loads(self.run("squeue", ["--json"]))
        return list(data.get("jobs", []))

    def sinfo_nodes(self) -> list[dict[str, Any]]:
        data = json.loads(self.run("sinfo", ["--json"]))
        return list(data.get("nodes", []))

    def finished(self, job_ids: Sequence[int]) -> dict[int, Finished]:
        """Finished jobs from the completion log (``sacct -c``: no slurmdbd needed)."""
        found: dict[int, Finished] = {}
        for chunk in range(0, len(job_ids), 1000):  # a bounded command line
            ids = ",".join(map(str, job_ids[chunk : chunk + 1000]))
            out = self.run("sacct", ["-c", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", ids])
            found.update(_finished_lines(out))
        return found

    def signal(self, job_id: int, signal: str = "TERM") -> None:
        """Signal the batch shell and every step (the job may checkpoint, then exit)."""
        self._scancel(["--full", f"--signal={signal}", str(job_id)])

    def cancel(self, job_id: int) -> None:
        self._scancel([str(job_id)])

    def _scancel(self, args: list[str]) -> None:
        """scancel; a job that ended meanwhile is what was wanted, not a failure."""
        try:
            self.run("scancel", args)
        except SlurmUnreachable:
            raise
        except SlurmError as exc:
            if not any(gone in str(exc).lower() for gone in ALREADY_GONE):
                raise


def _finished_lines(out: str) -> dict[int, Finished]:
    """``sacct -c -P -o JobID,State,ExitCode`` lines by job id (steps and headers skipped)."""
    found: dict[int, Finished] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0].isdecimal():
            continue
        code, _, sig = parts[2].partition(":")
        found[int(parts[0])] = Finished(
            state=parts[1].split()[0] if parts[1] else "",
            exit_code=int(code) if code.isdecimal() else None,
            # "0:9": killed by signal 9 ("0" after the colon is no signal).
            signal=int(sig) if sig.isdecimal() and int(sig) else None,
        )
    return found


def tres_gpus(tres: str, gres_name: str = "gpu") -> int:
    """GPUs in a TRES list (``cpu=2,node=1,gres/gpu=4``, ``gres/gpu:a100=2``...): the
    untyped count when given (typed ones are part of it), else the typed ones summed."""
    plain = 0
    typed = 0
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if not value.isdecimal():
            continue
        if key == f"gres/{gres_name}":
            plain = max(plain, int(value))
        elif key.startswith(f"gres/{gres_name}:"):
            typed += int(value)
    return plain or typed


def _per(value: str, gres_name: str = "gpu") -> int:
    """GPUs in one squeue ``tres-per-*`` field (``gres:gpu:2``, ``gres/gpu:2``, ``gpu:2``)."""
    total = 0
    for item in value.split(","):
        parts = item.replace("gres/", "gres:").split(":")
        if parts and parts[0] == "gres":
            parts = parts[1:]
        if parts and parts[0] == gres_name and parts[-1].isdecimal():
            total += int(parts[-1])
    return total


def requested_gpus(row: Mapping[str, str]) -> int:
    """The GPUs a pending job asks for, from its ``tres-per-*`` fields."""
    nodes = int(row["NumNodes"]) if row.get("NumNodes", "").isdecimal() else 1
    tasks = int(row["NumTasks"]) if row.get("NumTasks", "").isdecimal() else 1
    return max(
        _per(row.get("tres-per-job", "")),
        _per(row.get("tres-per-node", "")) * max(1, nodes),
        _per(row.get("tres-per-task", "")) * max(1, tasks),
    )


def job_state(job: Mapping[str, Any]) -> str:
    """The base state of a squeue --json job (``RUNNING``, ``COMPLETED``...)."""
    state = job.get("job_state", "")
    if isinstance(state, list):  # newer Slurm answers a list of flags
        state = state[0] if state else ""
    return str(state).split()[0] if state else ""


def exit_status(job: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(exit code, signal) of a squeue --json job (22.05 gives the raw wait status)."""
    raw = job.get("exit_code")
    if isinstance(raw, dict):  # newer Slurm: {"return_code": ..., "signal": {...}}
        code = raw.get("return_code")
        sig = (raw.get("signal") or {}).get("id")
        return (code if isinstance(code, int) else None, sig if isinstance(sig, int) else None)
    if not isinstance(raw, int):
        return None, None
    if raw & 0x7F:
        return None, raw & 0x7F
    return (raw >> 8) & 0xFF, None


def node_gpus(node: Mapping[str, Any], gres_name: str) -> int:
    """GPUs of one gres name on a node (``gpu:4``, ``gpu:a100:4(S:0-1)``, lists)."""
    total = 0
    for item in str(node.get("gres", "")).split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] == gres_name and len(parts) >= 2 and parts[-1].isdecimal():
            total += int(parts[-1])
    return total


def node_usable(node: Mapping[str, Any]) -> bool:
    """Whether the node can run jobs (not down, drained, failing or silent)."""
    states = {str(node.get("state", "")).upper()}
    states |= {str(flag).upper() for flag in node.get("state_flags", []) or []}
    return not (states & UNUSABLE_NODE)
