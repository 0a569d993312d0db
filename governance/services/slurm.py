"""The slurm executor's configuration and health, and what a job runs (docs/slurm.md).

Configuration is an admin's change, audited as SLURM_CONFIG_CHANGED. Health changes are
the executor's own (``actor=None``): a failure is audited as EXECUTOR_FAILED, an
unreachable cluster pauses the queue's executor (EXECUTOR_PAUSED, with since-when) and
its return resumes it (EXECUTOR_RESUMED). Capacity observed in Slurm goes through
``queue_capacity_observed`` so a drop reaches the engine as ``capacity_lost`` exactly as
an admin's capacity change would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from governance.models import (
    AuditEvent,
    InstanceType,
    JobQueue,
    QueueCapacity,
    SlurmDrift,
    SlurmQueueConfig,
    SlurmRun,
    SlurmTeamConfig,
    SlurmTypeConfig,
    Team,
)
from governance.models.capacity import Executor
from governance.roles import AnyUser
from governance.selectors.capacity import slurm_mapping
from governance.services import audit, hooks, notifications
from governance.services.capacity import capacity_map
from governance.services.errors import Errors, NotFound
from governance.services.kit import is_int, require_admin

# Slurm names (partition, feature, account, QOS, gres): letters, digits and -_.; a
# partition may be a list ("gpu-a,gpu-b": Slurm starts the job in whichever has room).
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
SLURM_NAMES = re.compile(r"^[A-Za-z0-9_.\-]+(,[A-Za-z0-9_.\-]+)*$")
# A Unix user name (POSIX portable, as useradd takes it); never root.
UNIX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_GPUS_PER_INSTANCE = 1024
MAX_GRACE_SECONDS = 3600
MAX_ARGS = 256
MAX_ARG_LENGTH = 4096
MAX_SCRIPT_LENGTH = 100_000
MAX_ENV = 64
MAX_ENV_VALUE = 4096
MAX_PATH = 1024
# Environment names a job may not set: GOV_ and SLURM_ variables are the executor's and
# Slurm's; SBATCH_ ones are sbatch's own settings, which would not set this job's (the
# product decides what it gets). The executor drops them from jobs stored before.
RESERVED_ENV_PREFIXES = ("GOV_", "SLURM_", "SBATCH_")
# Scheduler directives: lines starting with #SBATCH, which sbatch reads as options and
# would ask Slurm for more than the product admitted, or #PBS and #BSUB (which the
# executor has sbatch ignore: refused too, so nobody counts on them).
SCRIPT_DIRECTIVE = re.compile(r"^#(SBATCH|PBS|BSUB)", re.MULTILINE)
# sbatch refuses a batch script with one anywhere (an argv is written into one, too).
CRLF_MESSAGE = "holds a DOS line break (\\r\\n), which Slurm refuses in a batch script."


def _slurm_name(
    errors: Errors, field: str, value: Any, *, required: bool = False, many: bool = False
) -> str:
    if value in (None, ""):
        if required:
            errors.add(field, "Required.")
        return ""
    pattern = SLURM_NAMES if many else SLURM_NAME
    if not isinstance(value, str) or len(value) > 64 or not pattern.match(value):
        what = "names separated by commas, each of" if many else "1 to 64"
        errors.add(field, f"{what} letters, digits, '-', '_' or '.' (64 characters at most).")
        return ""
    return value


def _clean_text(errors: Errors, field: str, value: Any, limit: int) -> str:
    if not isinstance(value, str):
        errors.add(field, "Must be text.")
        return ""
    if "\x00" in value:
        errors.add(field, "Must not contain NUL characters.")
    if len(value) > limit:
        errors.add(field, f"At most {limit} characters.")
    return value


def clean_program(value: Any, errors: Errors, *, field: str = "program") -> dict[str, Any]:
    """Check what a job runs: ``{"command": [argv]}`` or ``{"script": "#!..."}``, with an
    optional absolute ``workdir`` and ``env``. Nothing of it reaches a shell unquoted: an
    argv is written into the batch script with ``shlex.quote``; a script is Slurm's batch
    script itself; env values are passed as the environment, never as text to parse."""
    if value in (None, {}):
        return {}
    if not isinstance(value, dict):
        errors.add(field, 'Give {"command": ["prog", "arg"...]} or {"script": "#!/bin/bash..."}.')
        return {}
    unknown = set(value) - {"command", "script", "workdir", "env"}
    if unknown:
        errors.add(field, f"Unknown keys: {', '.join(sorted(map(str, unknown)))}.")
    clean: dict[str, Any] = {}
    command, script = value.get("command"), value.get("script")
    if (command is None) == (script is None):
        errors.add(field, "Give exactly one of command (an argv list) or script.")
    if command is not None:
        if (
            not isinstance(command, list)
            or not command
            or len(command) > MAX_ARGS
            or not all(isinstance(a, str) and a and len(a) <= MAX_ARG_LENGTH for a in command)
            or any("\x00" in a for a in command)
        ):
            errors.add(
                field,
                f"command: a list of 1 to {MAX_ARGS} non-empty strings of at most "
                f"{MAX_ARG_LENGTH} characters.",
            )
        elif any("\r\n" in a for a in command):
            errors.add(field, f"command: {CRLF_MESSAGE}")
        else:
            clean["command"] = list(command)
    if script is not None:
        text = _clean_text(errors, field, script, MAX_SCRIPT_LENGTH)
        if text and not text.startswith("#!"):
            errors.add(field, "script: must start with #! (Slurm runs it as the batch script).")
        if "\r\n" in text:
            errors.add(field, f"script: {CRLF_MESSAGE}")
        directive = SCRIPT_DIRECTIVE.search(text) if text else None
        if directive:
            errors.add(
                field,
                f"script: line {text.count(chr(10), 0, directive.start()) + 1} is a "
                f"#{directive.group(1)} directive; the product sets what the job "
                "gets from Slurm (nodes, GPUs, partition, time), so a script carries none.",
            )
        clean["script"] = text
    if value.get("workdir") not in (None, ""):
        workdir = _clean_text(errors, field, value["workdir"], MAX_PATH)
        if workdir and not workdir.startswith("/"):
            errors.add(field, "workdir: an absolute path.")
        clean["workdir"] = workdir
    env = value.get("env")
    if env not in (None, {}):
        if not isinstance(env, dict) or len(env) > MAX_ENV:
            errors.add(field, f"env: a map of at most {MAX_ENV} names to text values.")
        else:
            clean_env: dict[str, str] = {}
            for name, val in env.items():
                if not isinstance(name, str) or not ENV_NAME.match(name):
                    errors.add(field, f"env: {str(name)[:40]!r} is not a variable name.")
                elif name.startswith(RESERVED_ENV_PREFIXES):
                    errors.add(
                        field,
                        f"env: {name}: names starting with "
                        f"{', '.join(RESERVED_ENV_PREFIXES)} are the executor's and Slurm's.",
                    )
                elif not isinstance(val, str) or "\x00" in val or len(val) > MAX_ENV_VALUE:
                    errors.add(field, f"env: {name} needs text of at most {MAX_ENV_VALUE}.")
                else:
                    clean_env[name] = val
            clean["env"] = clean_env
    return clean


config_snapshot = slurm_mapping


def _clean_types(errors: Errors, types_in: Any) -> dict[InstanceType, dict[str, Any]]:
    """The queue's type map: each a known type with a partition or a feature, its GPUs
    per instance and GRES name."""
    clean_types: dict[InstanceType, dict[str, Any]] = {}
    if not isinstance(types_in, Mapping):
        errors.add("types", 'A map of instance type to {"partition", "feature", ...}.')
        types_in = {}
    known = {t.name: t for t in InstanceType.objects.filter(name__in=list(types_in))}
    for name, spec in types_in.items():
        if name not in known:
            errors.add("types", f"{str(name)[:64]}: no such instance type.")
            continue
        if not isinstance(spec, Mapping):
            errors.add("types", f"{name}: an object.")
            continue
        extra = set(spec) - {"partition", "feature", "gpus_per_instance", "gres_name"}
        if extra:
            errors.add("types", f"{name}: unknown keys {', '.join(sorted(map(str, extra)))}.")
        sub = Errors()
        partition = _slurm_name(sub, "types", spec.get("partition"), many=True)
        feature = _slurm_name(sub, "types", spec.get("feature"))
        gres = _slurm_name(sub, "types", spec.get("gres_name") or "gpu", required=True)
        gpus = spec.get("gpus_per_instance", 1)
        if not is_int(gpus) or not 0 <= gpus <= MAX_GPUS_PER_INSTANCE:
            sub.add("types", f"gpus_per_instance: an integer 0 to {MAX_GPUS_PER_INSTANCE}.")
        if not partition and not feature and not sub:
            sub.add("types", "a partition or a feature is needed.")
        for message in sub.messages("types"):
            errors.add("types", f"{name}: {message}")
        clean_types[known[name]] = {
            "partition": partition,
            "feature": feature,
            "gpus_per_instance": gpus,
            "gres_name": gres,
        }
    return clean_types


def slurm_config_set(
    *, actor: AnyUser, queue: JobQueue | int, config: Mapping[str, Any], reason: str = ""
) -> dict[str, Any]:
    """Set how a queue maps onto Slurm: ``account``, ``qos``, ``grace_seconds``, ``types``
    (``{type: {partition, feature, gpus_per_instance, gres_name}}``, replacing the map),
    ``teams`` (``{team: {user, account, qos}}``: the Unix user each team's jobs run as,
    replacing the map) and ``drift_report_only``. Each type needs a partition or a
    feature. Audited as SLURM_CONFIG_CHANGED."""
    require_admin(actor, "configure Slurm queues")
    errors = Errors()
    if not isinstance(config, Mapping):
        errors.add("slurm", "Give an object with account, qos, grace_seconds and types.")
        errors.raise_if_any()
    unknown = set(config) - {
        "account",
        "qos",
        "grace_seconds",
        "types",
        "teams",
        "drift_report_only",
    }
    for key in sorted(map(str, unknown)):
        errors.add(key, "Unknown field.")
    queue_id = queue if isinstance(queue, int) else queue.pk
    with transaction.atomic():
        locked = JobQueue.objects.select_for_update().filter(pk=queue_id).first()
        if locked is None:
            raise NotFound({"detail": ["No such queue."]})
        before = config_snapshot(locked)
        account = _slurm_name(errors, "account", config.get("account", before["account"]))
        qos = _slurm_name(errors, "qos", config.get("qos", before["qos"]))
        grace = config.get("grace_seconds", before["grace_seconds"])
        if not is_int(grace) or not 0 <= grace <= MAX_GRACE_SECONDS:
            errors.add("grace_seconds", f"An integer from 0 to {MAX_GRACE_SECONDS}.")
        clean_types = _clean_types(errors, config.get("types", before["types"]))
        clean_teams = _clean_teams(errors, config.get("teams", before["teams"]))
        report_only = config.get("drift_report_only", before["drift_report_only"])
        if not isinstance(report_only, bool):
            errors.add("drift_report_only", "true or false.")
        errors.raise_if_any()
        row, _ = SlurmQueueConfig.objects.get_or_create(queue=locked)
        row.account, row.qos, row.grace_seconds = account, qos, grace
        row.drift_report_only = report_only
        row.save(update_fields=["account", "qos", "grace_seconds", "drift_report_only"])
        SlurmTeamConfig.objects.filter(queue=locked).exclude(team__in=list(clean_teams)).delete()
        for team, spec in clean_teams.items():
            SlurmTeamConfig.objects.update_or_create(queue=locked, team=team, defaults=spec)
        existing = {t.instance_type_id: t for t in SlurmTypeConfig.objects.filter(queue=locked)}
        for itype, spec in clean_types.items():
            found = existing.pop(itype.pk, None) or SlurmTypeConfig(
                queue=locked, instance_type=itype
            )
            for key, val in spec.items():
                setattr(found, key, val)
            found.save()
        for gone in existing.values():
            gone.delete()
        after = config_snapshot(locked)
        audit.record_change(
            event_type=AuditEvent.SLURM_CONFIG_CHANGED,
            actor=actor,
            subject=locked,
            before=before,
            after=after,
            reason=reason,
            queue_id=locked.pk,
        )
        hooks.queue_changed(locked.pk)
    return after


def _clean_teams(errors: Errors, value: Any) -> dict[Team, dict[str, str]]:
    """``{team name: {"user", "account", "qos"}}``: each team's Unix user (not root) and
    optional Slurm account and QOS; one Unix user per team."""
    if not isinstance(value, Mapping):
        errors.add("teams", 'A map of team to {"user", "account", "qos"}.')
        return {}
    known = {t.name: t for t in Team.objects.filter(name__in=[str(k) for k in value])}
    clean: dict[Team, dict[str, str]] = {}
    users: dict[str, str] = {}
    for name, spec in value.items():
        label = str(name)[:64]
        if label not in known:
            errors.add("teams", f"{label}: no such team.")
            continue
        if not isinstance(spec, Mapping):
            errors.add("teams", f"{label}: an object with user, account and qos.")
            continue
        extra = set(spec) - {"user", "account", "qos"}
        if extra:
            errors.add("teams", f"{label}: unknown keys {', '.join(sorted(map(str, extra)))}.")
        user = spec.get("user")
        if not isinstance(user, str) or not UNIX_USER.match(user) or user == "root":
            errors.add(
                "teams",
                f"{label}: user: a Unix user name (a-z, digits, '_', '-'; 32 at most), not root.",
            )
            continue
        if user in users:
            errors.add("teams", f"{label}: user {user} already runs the jobs of {users[user]}.")
            continue
        users[user] = label
        sub = Errors()
        account = _slurm_name(sub, "teams", spec.get("account"))
        qos = _slurm_name(sub, "teams", spec.get("qos"))
        for message in sub.messages("teams"):
            errors.add("teams", f"{label}: {message}")
        clean[known[label]] = {"unix_user": user, "account": account, "qos": qos}
    return clean


def queue_capacity_observed(
    *, queue_id: int, capacity: Mapping[str, int], now: datetime, explanation: str
) -> dict[str, int] | None:
    """The executor saw the cluster supply ``capacity`` (types it runs only): store it
    when it differs, audited as CAPACITY_CHANGED by the system, and ask for a cycle, where
    a drop below usage stops jobs as ``capacity_lost`` (docs/scheduling.md). None when unchanged."""
    with transaction.atomic():
        queue = JobQueue.objects.select_for_update().get(pk=queue_id)
        before = capacity_map(queue)
        after = {**before, **capacity}
        if after == before:
            return None
        types = {t.name: t for t in InstanceType.objects.filter(name__in=list(capacity))}
        for name, count in capacity.items():
            QueueCapacity.objects.update_or_create(
                queue=queue, instance_type=types[name], defaults={"count": count}
            )
        audit.record(
            event_type=AuditEvent.CAPACITY_CHANGED,
            actor=None,
            subject=queue,
            before={"capacity": before},
            after={"capacity": after},
            reason=explanation,
            queue_id=queue.pk,
            at=now,
        )
        hooks.queue_changed(queue.pk)
    return after


def executor_failed(*, queue_id: int, now: datetime, message: str, retry_in: float) -> None:
    """A Slurm command failed: audited, and the next attempt put off by ``retry_in`` s."""
    with transaction.atomic():
        config, _ = SlurmQueueConfig.objects.select_for_update().get_or_create(queue_id=queue_id)
        config.failures += 1
        config.last_error = message[:2000]
        config.retry_at = now + timedelta(seconds=retry_in)
        config.save(update_fields=["failures", "last_error", "retry_at"])
        audit.record(
            event_type=AuditEvent.EXECUTOR_FAILED,
            actor=None,
            subject=config.queue,
            after={"error": message[:2000], "failures": config.failures, "retry_in": retry_in},
            reason=message[:2000],
            queue_id=queue_id,
            at=now,
        )


def executor_pause(*, queue_id: int, now: datetime, message: str, retry_in: float) -> None:
    """Slurm cannot be reached: the executor pauses (changing nothing) until it answers."""
    with transaction.atomic():
        config, _ = SlurmQueueConfig.objects.select_for_update().get_or_create(queue_id=queue_id)
        first = config.paused_since is None
        config.paused_since = config.paused_since or now
        config.failures += 1
        config.last_error = message[:2000]
        config.retry_at = now + timedelta(seconds=retry_in)
        config.save(update_fields=["paused_since", "failures", "last_error", "retry_at"])
        if first:
            audit.record(
                event_type=AuditEvent.EXECUTOR_PAUSED,
                actor=None,
                subject=config.queue,
                after={"paused_since": now.isoformat(), "error": message[:2000]},
                reason=f"Slurm unreachable: {message[:2000]}",
                queue_id=queue_id,
                at=now,
            )


def executor_resume(*, queue_id: int, now: datetime) -> None:
    """Slurm answers again: the executor resumes where it stopped."""
    with transaction.atomic():
        config = SlurmQueueConfig.objects.select_for_update().get(queue_id=queue_id)
        if config.paused_since is None and not config.failures:
            return
        since = config.paused_since
        config.paused_since = None
        config.failures = 0
        config.retry_at = None
        config.save(update_fields=["paused_since", "failures", "retry_at"])
        if since is not None:
            audit.record(
                event_type=AuditEvent.EXECUTOR_RESUMED,
                actor=None,
                subject=config.queue,
                before={"paused_since": since.isoformat()},
                after={"paused_since": None},
                reason=f"Slurm answers again after {(now - since).total_seconds():.0f} s.",
                queue_id=queue_id,
                at=now,
            )


DRIFT_WORDS = {
    "unknown": "not submitted by the product",
    "gpus": "more GPUs than admitted",
    "nodes": "more nodes than admitted",
    "array": "an array",
    "exclusive": "exclusive nodes",
}


def _drift_details(
    sid: int,
    job: Mapping[str, Any],
    slurm_run: SlurmRun | None,
    kinds: list[str],
    action: str,
) -> dict[str, Any]:
    """What a drift row and its audit entry keep of a Slurm job, each text bounded."""
    return {
        "slurm_job_id": sid,
        "user": str(job.get("user", ""))[:64],
        "name": str(job.get("name", ""))[:200],
        "partition": str(job.get("partition", ""))[:64],
        "state": str(job.get("job_state", ""))[:32],
        "gpus": int(job.get("gpus") or 0),
        "nodes": int(job.get("nodes") or 0),
        "array": bool(job.get("array")),
        "exclusive": bool(job.get("exclusive")),
        "found": kinds,
        "job": slurm_run.job_id if slurm_run is not None else None,
        "action": action,
    }


def _drift_words(
    details: Mapping[str, Any], slurm_run: SlurmRun | None, kinds: list[str], report_only: bool
) -> str:
    """The sentence the audit entry and the admins' notification give a drift."""
    whose = (
        f"the product's job {slurm_run.job_id} (run {slurm_run.run})"
        if slurm_run is not None
        else "a job the product did not submit"
    )
    return (
        f"Slurm job {details['slurm_job_id']} of user {details['user'] or '?'} on "
        f"{details['partition']}, {whose}, holds or asks for {details['gpus']} GPUs on "
        f"{details['nodes']} nodes: {', '.join(DRIFT_WORDS.get(k, k) for k in kinds)}. "
        + ("Reported only (the queue's setting)." if report_only else "Cancelled.")
    )


def slurm_drift_found(
    *,
    queue_id: int,
    found: list[tuple[Mapping[str, Any], SlurmRun | None, list[str]]],
    report_only: bool,
    now: datetime,
) -> list[SlurmDrift]:
    """What the executor's drift guard found on the queue's partitions in one pass
    (docs/slurm.md#security-model): ``found`` holds each Slurm job (as the executor lists
    it), the product's run it carries if any, and what is beyond the admission. A job
    found for the first time is recorded (the queue's Slurm page lists it), audited as
    EXECUTOR_DRIFT by the system with what was found, and told to admins; a job found
    before is not again. Jobs no longer found are marked gone. Returns the new rows."""
    ids = [int(job["job_id"]) for job, _, _ in found]
    SlurmDrift.objects.filter(queue_id=queue_id, gone_at__isnull=True).exclude(
        slurm_job_id__in=ids
    ).update(gone_at=now)
    if not found:
        return []
    known = set(
        SlurmDrift.objects.filter(queue_id=queue_id, slurm_job_id__in=ids).values_list(
            "slurm_job_id", flat=True
        )
    )
    SlurmDrift.objects.filter(queue_id=queue_id, slurm_job_id__in=ids).update(
        seen_at=now, gone_at=None
    )
    new: list[SlurmDrift] = []
    queue = JobQueue.objects.get(pk=queue_id)
    action = "reported" if report_only else "cancelled"
    for job, slurm_run, kinds in found:
        sid = int(job["job_id"])
        if sid in known:
            continue
        details = _drift_details(sid, job, slurm_run, kinds, action)
        drift = SlurmDrift.objects.create(
            queue=queue,
            slurm_job_id=sid,
            user=str(job.get("user", ""))[:64],
            partition=str(job.get("partition", ""))[:64],
            kinds=",".join(kinds),
            details=details,
            run=slurm_run,
            action=action,
            found_at=now,
            seen_at=now,
        )
        new.append(drift)
        what = _drift_words(details, slurm_run, kinds, report_only)
        audit.record(
            event_type=AuditEvent.EXECUTOR_DRIFT,
            actor=None,
            subject=queue,
            after=details,
            reason=what,
            queue_id=queue_id,
            at=now,
        )
        notifications.slurm_drift(queue, sid, what, now)
    return new


MAX_SLURM_JOB_ID = 2**32 - 1


def slurm_job_ended(*, slurm_job_id: Any, defer: hooks.Defer | None = None) -> dict[str, Any]:
    """The completion hook: a Slurm job ended (its node epilog calls, docs/slurm.md). When
    it carried a run of a queue run by Slurm, that queue's executor pass runs now, while
    the epilog still holds the job's nodes: the pass reads the job's end from the
    completion log, reports it, and submits what the cycle starts next, so Slurm starts
    those jobs the moment the epilog ends, rather than at its next scheduling tick. The
    pass changes state through the run services, which audit it; the call itself changes
    nothing. A job the product does not know is answered ``known: false``. With ``defer``
    the pass answers once the node may go and hands the rest of it (recording what it
    did) to ``defer``: the caller runs it once it has answered the epilog."""
    errors = Errors()
    if not is_int(slurm_job_id) or not 1 <= int(slurm_job_id) <= MAX_SLURM_JOB_ID:
        errors.add(
            "slurm_job_id", f"must be a Slurm job id, an integer from 1 to {MAX_SLURM_JOB_ID}"
        )
    errors.raise_if_any()
    queue_id = (
        SlurmRun.objects.filter(slurm_job_id=int(slurm_job_id), job__queue__executor=Executor.SLURM)
        .order_by("-id")
        .values_list("job__queue_id", flat=True)
        .first()
    )
    if queue_id is None:
        return {"known": False, "queue": None, "executor_pass": None}
    return {
        "known": True,
        "queue": queue_id,
        "executor_pass": hooks.run_executor_pass(queue_id, int(slurm_job_id), defer=defer),
    }
