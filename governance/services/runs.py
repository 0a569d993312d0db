"""Where jobs run: the scheduler's decisions and the executors' reports, applied to the DB.

The scheduler's cycle (``scheduler/cycle/apply.py``) calls the ``runs_admit``/
``run_preempt``/``run_time_out`` functions inside its transaction with ``actor=None`` (the
system); executors (the simulated fleet and external agents) report progress through the
``run_*`` reports.
Every report names the job's ``run``: a late report from a run that was preempted since
is refused, so it can never complete or checkpoint the next run.

Executors act only on runs of their own queues that they hold (docs/agents.md): a
report with an ``actor`` (an agent's credentials) must be about a job of a queue run by
agents, and about a run that this credential claimed (under the ``agent`` name it
claimed with, when the report names one). ``actor=None`` is the system: the scheduler
and the simulated fleet. Every refusal of a run that is over has one shape, a 409 with
``{"run": [why], "current": {"job", "run", "state", "stop"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from governance import metrics, prepared
from governance.models import AuditEntry, AuditEvent, DecisionRule, Job, JobEvent, JobState
from governance.models.capacity import Executor
from governance.roles import AnyUser
from governance.selectors import jobs as job_selectors
from governance.selectors.rows import table
from governance.services import audit, decisions, inserts, notifications
from governance.services import workloads as workload_services
from governance.services.errors import Conflict, PermissionDenied, ValidationFailed
from governance.services.hooks import queue_changed
from governance.services.kit import job_event, lock_job, valid_id
from scheduler.engine import work

# The cycle's writes of its admissions and completions, each one statement prepared once
# per connection (``governance.prepared``): as ``Job.objects.filter(pk__in=...).update``
# wrote them, which compiled the same UPDATE anew each cycle (0.7 ms of a cycle's CPU).
# The jobs that start alike start with the same values; the run goes up by one and the
# first start is kept.
_STARTED = (
    f"UPDATE {table(Job)} SET state = %s, instance_type_id = %s, plan_id = %s,"
    " preference = %s, borrowed = %s, run = run + 1, run_started_at = %s,"
    " progress_at = NULL, started_at = COALESCE(started_at, %s), agent = '',"
    " claimed_by_id = NULL, claimed_at = NULL, last_heartbeat_at = NULL"
    " WHERE id = ANY(%s::bigint[])"
)
# Each job finished when its own ``finished_at`` says; its work is its duration when it
# has one (the run did all of it), else what it reported, and that is its checkpoint.
_SUCCEEDED = (
    f"UPDATE {table(Job)} AS j SET state = %s, finished_at = f.at,"
    " work_done = COALESCE(j.duration::double precision, j.work_done),"
    " checkpoint_work = COALESCE(j.duration::double precision, j.work_done),"
    " run_started_at = NULL"
    " FROM unnest(%s::bigint[], %s::timestamptz[]) AS f(id, at) WHERE j.id = f.id"
)

# Runs one claim may take (an agent asks again for more).
MAX_CLAIM = 100

RUNNING_REPORTS = ("started", "heartbeat", "checkpoint")


def _type_name(job: Job) -> str | None:
    # Test the id first: a job with no type must not cost a query to find that out.
    return job.instance_type.name if job.instance_type_id and job.instance_type else None


def _snapshot(job: Job, type_name: str | None = None) -> dict[str, Any]:
    """``type_name``, when the caller knows it, spares the query for the job's type."""
    return {
        "job": job.name,
        "share": job.share.name,
        "team": job.share.team.name,
        "state": job.state,
        "instance_type": type_name or _type_name(job),
        "preference": job.preference,
        "borrowed": job.borrowed,
        "preemptions": job.preemptions,
        "run": job.run,
        "work_done": round(job.work_done, 3),
        "checkpoint_work": round(job.checkpoint_work, 3),
    }


def current_work(job: Job, now: datetime, *, speed: float, time_factor: float = 1.0) -> float:
    """Work units done by ``job`` at ``now`` in its current run (docs/scheduling.md, "Work and lost
    work"): its latest progress plus the time since then at the type's speed.

    Before any report the latest progress is what the run started from, at its start; a
    run spends ``restart_overhead`` seconds preparing after a preemption before it does
    work. ``time_factor`` is how many simulated seconds pass per real second.
    """
    if job.state != JobState.RUNNING or job.run_started_at is None:
        return job.work_done
    since = job.run_started_at.timestamp()
    if job.preemptions and job.run > 1:
        since += job.restart_overhead / time_factor
    if job.progress_at is not None:
        since = max(since, job.progress_at.timestamp())
    return float(
        work.work_done(
            progress=job.work_done,
            since=since,
            now=now.timestamp(),
            rate=speed * time_factor,
            duration=job.duration,
        )
    )


@dataclass(frozen=True)
class Admission:
    """One scheduler decision to start a pending job on one of its preferences; on a
    capacity plan when ``plan_id`` is given (the run records its plan)."""

    job: Job
    instance_type_id: int
    instance_type_name: str
    count: int
    preference: int
    borrowed: int
    rule: str
    share_versions: dict[str, int]
    explanation: str
    plan_id: int | None = None
    plan_name: str | None = None
    lent_by: list[dict[str, Any]] = field(default_factory=list)
    """A borrowing run: whose capacity its share holds (``{"share", "team",
    "instances"}``, or ``{"source", "instances"}`` for capacity no share owns)."""


# Scheduler decisions run inside the cycle's transaction, which an error rolls back whole:
# they take no savepoint of their own (two round trips each, per decision).
@transaction.atomic(savepoint=False)
def runs_admit(*, admissions: Sequence[Admission], now: datetime) -> list[Job]:
    """Start pending jobs (the cycle's admissions, its rows locked) with one statement per
    kind of write: the jobs that start alike (same type, plan, preference and borrowed
    count) are one UPDATE, and the timeline events and audit entries one INSERT each. A
    wave of admissions is what the slurm executor's completion hook waits for."""
    events: list[JobEvent] = []
    entries: list[AuditEntry] = []
    alike: dict[tuple[int, int | None, int, int], list[int]] = {}
    for a in admissions:
        job = a.job
        before = _snapshot(job)
        job.state = JobState.RUNNING
        job.instance_type_id = a.instance_type_id
        job.plan_id = a.plan_id
        job.preference = a.preference
        job.borrowed = a.borrowed
        job.run += 1
        job.run_started_at = now
        job.progress_at = None
        job.started_at = job.started_at or now
        job.agent = ""
        job.claimed_by_id = None
        job.claimed_at = None
        job.last_heartbeat_at = None
        alike.setdefault((a.instance_type_id, a.plan_id, a.preference, a.borrowed), []).append(
            job.pk
        )
        data = {
            "instance_type": a.instance_type_name,
            "count": a.count,
            "preference": a.preference,
            "borrowed": a.borrowed,
            "rule": a.rule,
            "run": job.run,
            "plan": a.plan_name,
        }
        if a.lent_by:
            data["lent_by"] = a.lent_by
        events.append(JobEvent(job=job, at=now, type="admitted", message=a.explanation, data=data))
        after = _snapshot(job, a.instance_type_name)
        after.update(
            {
                "rule": a.rule,
                "count": a.count,
                "share_versions": a.share_versions,
                "plan": a.plan_name,
            }
        )
        entries.append(
            audit.job_entry(
                event_type=AuditEvent.JOB_ADMITTED,
                actor=None,
                job=job,
                before=before,
                after=after,
                reason=a.explanation,
                at=now,
            )
        )
    with prepared.cursor() as cursor:
        for (type_id, plan_id, preference, borrowed), pks in alike.items():
            # The rows are locked by the cycle, as read: their run is the one counted above.
            cursor.execute(
                _STARTED,
                [JobState.RUNNING, type_id, plan_id, preference, borrowed, now, now, pks],
            )
    inserts.insert_many(events)
    inserts.insert_many(entries)
    return [a.job for a in admissions]


@transaction.atomic(savepoint=False)
def _stop_run(
    job: Job,
    lost_work: float,
    saved_work: float,
    fail: bool,
    counts_against_retries: bool,
    now: datetime,
) -> None:
    """The job's fields when its run is stopped: counts, work kept from the last
    checkpoint, the agent's stop order, and its new state."""
    job.preemptions += 1
    if counts_against_retries:
        job.counted_preemptions += 1
    job.recomputed += lost_work
    job.work_done = saved_work
    job.checkpoint_work = saved_work
    if job.agent:
        job.stop_requested_run = job.run
    job.state = JobState.FAILED if fail else JobState.PENDING
    if fail:
        job.finished_at = now
    job.run_started_at = None
    job.progress_at = None
    job.borrowed = 0
    job.save(
        update_fields=[
            "preemptions",
            "counted_preemptions",
            "recomputed",
            "work_done",
            "checkpoint_work",
            "stop_requested_run",
            "state",
            "finished_at",
            "run_started_at",
            "progress_at",
            "borrowed",
        ]
    )


def _record_retries_exhausted(job: Job, now: datetime) -> None:
    """A preempted job that has no retry left fails: its event, audit entry and the
    decision opened on it."""
    message = f"Failed: preempted {job.preemptions} times, more than the share's retry limit."
    job_event(job, now, "failed", message, reason=DecisionRule.RETRIES_EXHAUSTED)
    audit.record_job(
        event_type=AuditEvent.JOB_FAILED,
        actor=None,
        job=job,
        before={"state": JobState.PENDING},
        after={
            "state": JobState.FAILED,
            "rule": DecisionRule.RETRIES_EXHAUSTED,
            "preemptions": job.preemptions,
        },
        reason=message,
        at=now,
    )
    decisions.decision_open(job=job, now=now)


def run_preempt(
    *,
    job: Job,
    reason: str,
    by_job: Job | None,
    lost_work: float,
    saved_work: float,
    fail: bool,
    counts_against_retries: bool,
    share_versions: dict[str, int],
    now: datetime,
    explanation: str,
) -> Job:
    """Stop a running job: back to pending from its last checkpoint, or failed.

    ``fail`` is the engine's verdict that the job's retries are exhausted. An agent that
    holds the run gets a stop order (``stop_requested_run``) it must acknowledge.
    """
    before = _snapshot(job)
    _stop_run(job, lost_work, saved_work, fail, counts_against_retries, now)
    by = by_job.name if by_job is not None else None
    by_share = by_job.share.name if by_job is not None else None
    by_team = by_job.share.team.name if by_job is not None else None
    job_event(
        job,
        now,
        "preempted",
        explanation,
        reason=reason,
        by=by_job.pk if by_job else None,
        lost_work=round(lost_work, 3),
        counted=counts_against_retries,
    )
    after = _snapshot(job)
    after.update(
        {
            "rule": reason,
            "by_job": by_job.pk if by_job else None,
            "by": by,
            "by_share": by_share,
            "by_team": by_team,
            "lost_work": round(lost_work, 3),
            "share_versions": share_versions,
        }
    )
    audit.record_job(
        event_type=AuditEvent.JOB_PREEMPTED,
        actor=None,
        job=job,
        before=before,
        after=after,
        reason=explanation,
        at=now,
    )
    if fail:
        _record_retries_exhausted(job, now)
    notifications.job_stopped(job, failed=fail, why=explanation, at=now)
    return job


@transaction.atomic(savepoint=False)
def run_time_out(*, job: Job, now: datetime, explanation: str, reason: str = "max_pending") -> Job:
    """A job gives up waiting (a scheduler decision): it never started within its max
    pending time (``reason`` max_pending), or no preference can meet its deadline any
    more (``deadline``)."""
    before = _snapshot(job)
    job.state = JobState.TIMED_OUT
    job.finished_at = now
    job.save(update_fields=["state", "finished_at"])
    job_event(job, now, "timed_out", explanation, reason=reason)
    audit.record_job(
        event_type=AuditEvent.JOB_TIMED_OUT,
        actor=None,
        job=job,
        before=before,
        after={
            **_snapshot(job),
            "rule": DecisionRule.TIMEOUT,
            "reason": reason,
            "max_pending": job.max_pending,
        },
        reason=explanation,
        at=now,
    )
    return job


def _locked_job(job_id: int) -> Job:
    return lock_job(job_id, "share__team", "instance_type", "queue")


def _run_conflict(job: Job, message: str) -> Conflict:
    """The one 409 of the agent protocol: the run named is not one the agent can act on
    any more; ``current`` says where the job is and whether to stop the run."""
    return Conflict(
        {"run": [message]},
        current={
            "job": job.pk,
            "run": job.run,
            "state": job.state,
            "stop": True,
        },
    )


def _check_agent_queue(job: Job, actor: AnyUser | None) -> None:
    """Agent credentials act only on jobs of queues run by agents."""
    if actor is not None and job.queue.executor != Executor.AGENT:
        raise PermissionDenied(
            {
                "detail": [
                    f"job {job.pk} is in queue {job.queue.name}, run by the "
                    f"{job.queue.executor} executor: agents act only on queues run by agents"
                ]
            }
        )


def _check_holder(job: Job, actor: AnyUser | None, agent: str | None) -> None:
    """Agent credentials act on a run only as the agent that claimed it."""
    if actor is None:
        return
    if not job.agent or job.claimed_by_id is None:
        raise PermissionDenied(
            {"detail": [f"run {job.run} of job {job.pk} is held by no agent: claim it first"]}
        )
    if job.claimed_by_id != actor.pk or (agent and agent != job.agent):
        raise PermissionDenied(
            {
                "detail": [
                    f"run {job.run} of job {job.pk} is held by agent {job.agent}"
                    f"{' under other credentials' if job.claimed_by_id != actor.pk else ''}, "
                    "not by you"
                ]
            }
        )


def _locked_running(
    job_id: int, run: int, actor: AnyUser | None = None, agent: str | None = None
) -> Job:
    """The job, locked, when ``run`` is its current, running run held by ``actor``."""
    job = _locked_job(job_id)
    _check_agent_queue(job, actor)
    if job.run != run or job.state != JobState.RUNNING:
        raise _run_conflict(
            job,
            f"run {run} of job {job.pk} is over: the job is {job.state} on run {job.run}; stop it",
        )
    _check_holder(job, actor, agent)
    return job


COMPLETED_FIELDS = ["state", "finished_at", "work_done", "checkpoint_work", "run_started_at"]


@transaction.atomic
def run_complete(
    *,
    actor: AnyUser | None,
    job_id: int,
    run: int,
    now: datetime,
    work: float | None = None,
    agent: str | None = None,
    output_valid: bool | None = None,
) -> Job:
    """The executor reports the run finished its work: the job succeeds and frees capacity.

    ``output_valid`` is the executor's verdict on the output, if it has one: for a run
    that resumed after a preemption it verifies, or fails, the job's workload
    (docs/workloads.md)."""
    job = _locked_running(job_id, run, actor, agent)
    event, entry = _completed(job, actor, run, now, work)
    job.output_valid = output_valid
    job.save(update_fields=[*COMPLETED_FIELDS, "output_valid"])
    inserts.insert(event)
    inserts.insert(entry)
    workload_services.run_outcome(job, output_valid=output_valid, actor=actor, at=now)
    queue_changed(job.queue_id)
    return job


# Called by the executors inside the cycle's transaction, which an error rolls back
# whole: no savepoint of its own.
@transaction.atomic(savepoint=False)
def runs_complete(
    *,
    done: Sequence[tuple[int, int]],
    now: datetime,
    finished: Mapping[int, datetime] | None = None,
) -> list[Job]:
    """The executor (no agent: ``actor`` None) reports several runs ``(job id, run)``
    finished at once, as ``run_complete`` does one by one but with one statement per kind
    of write: the slurm executor's completion hook reports a whole wave of jobs while
    Slurm holds a node for it, and the simulated fleet the runs it finished since the
    last cycle. ``finished``: when each job finished, if not ``now``. Events and audit
    entries are written in the order of ``done``. A run that is no longer its job's
    running run is left out (the jobs completed are returned)."""
    at = dict(finished or {})
    locked = {job.pk: job for job in _locked_runs(done)}
    completed = [locked[job_id] for job_id, _ in done if job_id in locked]
    if not completed:
        return []
    events: list[JobEvent] = []
    entries: list[AuditEntry] = []
    for job in completed:
        event, entry = _completed(job, None, job.run, at.get(job.pk, now), None)
        events.append(event)
        entries.append(entry)
    # One UPDATE with the values ``_completed`` gave each job.
    with prepared.cursor() as cursor:
        cursor.execute(
            _SUCCEEDED,
            [JobState.SUCCEEDED, [job.pk for job in completed], [j.finished_at for j in completed]],
        )
    inserts.insert_many(events)
    inserts.insert_many(entries)
    for queue_id in sorted({job.queue_id for job in completed}):
        queue_changed(queue_id)
    return completed


@transaction.atomic(savepoint=False)
def runs_output_reported(*, verdicts: Sequence[tuple[Job, bool]], now: datetime) -> None:
    """The executor's verdicts on completed runs' output (``runs_complete``'s jobs, in
    its transaction): each job's ``output_valid``, and for a run that resumed after a
    preemption its workload verified or failed (docs/workloads.md)."""
    for job, valid in verdicts:
        Job.objects.filter(pk=job.pk).update(output_valid=valid)
        job.output_valid = valid
        workload_services.run_outcome(job, output_valid=valid, at=now)


def _completed(
    job: Job, actor: AnyUser | None, run: int, now: datetime, work: float | None
) -> tuple[JobEvent, AuditEntry]:
    """Mark ``job`` (locked) succeeded; its timeline event and audit entry, not yet written."""
    before = _snapshot(job)
    job.state = JobState.SUCCEEDED
    job.finished_at = now
    job.work_done = float(job.duration) if job.duration is not None else (work or job.work_done)
    job.checkpoint_work = job.work_done
    job.run_started_at = None
    event = JobEvent(job=job, at=now, type="completed", message="Completed.", data={"run": run})
    entry = audit.job_entry(
        event_type=AuditEvent.JOB_COMPLETED,
        actor=actor,
        job=job,
        before=before,
        after=_snapshot(job),
        at=now,
    )
    return event, entry


@transaction.atomic
def run_fail(
    *,
    actor: AnyUser | None,
    job_id: int,
    run: int,
    now: datetime,
    message: str,
    agent: str | None = None,
) -> Job:
    """The executor reports the job's own failure (not a preemption): it ends as FAILED."""
    job = _locked_running(job_id, run, actor, agent)
    before = _snapshot(job)
    job.state = JobState.FAILED
    job.finished_at = now
    job.run_started_at = None
    job.save(update_fields=["state", "finished_at", "run_started_at"])
    job_event(
        job, now, "failed", message or "The job failed.", reason=DecisionRule.EXECUTOR, run=run
    )
    audit.record_job(
        event_type=AuditEvent.JOB_FAILED,
        actor=actor,
        job=job,
        before=before,
        after={**_snapshot(job), "rule": DecisionRule.EXECUTOR},
        reason=message,
        at=now,
    )
    notifications.job_stopped(job, failed=True, why=message or "The job failed.", at=now)
    workload_services.run_outcome(
        job,
        output_valid=None,
        failed=True,
        actor=actor,
        note=f"The resumed run failed: {message or 'the job failed'}",
        at=now,
    )
    transaction.on_commit(lambda: metrics.count_executor_error("failed"))
    queue_changed(job.queue_id)
    return job


@transaction.atomic
def run_report(
    *,
    actor: AnyUser | None,
    job_id: int,
    run: int,
    kind: str,
    now: datetime,
    work: float | None = None,
    agent: str | None = None,
) -> Job:
    """A running job's ``started``, ``heartbeat`` or ``checkpoint`` report.

    ``work`` (the agent's ``progress``) is the run's progress in work units: it becomes the
    latest progress known, from which work and lost work are extrapolated. A ``started``
    report without it means the run starts from its resume point now. Heartbeats prove the
    run is alive, so they update ``last_heartbeat_at``; they are not audited (one every few
    seconds per job would drown the trail). Starts and checkpoints change what a
    preemption would cost, so they are.
    """
    if kind not in RUNNING_REPORTS:
        raise ValidationFailed({"kind": [f"must be one of {', '.join(RUNNING_REPORTS)}"]})
    if kind == "checkpoint" and work is None:
        raise ValidationFailed({"progress": ["a checkpoint must report progress >= 0"]})
    job = _locked_running(job_id, run, actor, agent)
    if work is not None:
        if work < 0:
            raise ValidationFailed({"progress": ["must be >= 0"]})
        if job.duration is not None and work > job.duration:
            raise ValidationFailed({"progress": [f"must be at most the duration {job.duration}"]})
    job.last_heartbeat_at = now
    fields = ["last_heartbeat_at"]
    if work is not None or kind == "started":
        # The latest progress known, and when: work later on is extrapolated from here.
        job.work_done = float(work) if work is not None else job.work_done
        job.progress_at = now
        fields += ["work_done", "progress_at"]
    if kind == "checkpoint":
        assert work is not None
        before = _snapshot(job)
        job.checkpoint_work = max(job.checkpoint_work, float(work))
        fields.append("checkpoint_work")
        job.save(update_fields=fields)
        job_event(job, now, "checkpoint", f"Checkpoint saved at {work:g} work units.", work=work)
        audit.record_job(
            event_type=AuditEvent.JOB_CHECKPOINTED,
            actor=actor,
            job=job,
            before=before,
            after=_snapshot(job),
            at=now,
        )
        return job
    job.save(update_fields=fields)
    if kind == "started":
        _record_started(job, actor, now)
    return job


def _record_started(job: Job, actor: AnyUser | None, now: datetime) -> None:
    """The run's ``started`` timeline event and audit entry."""
    event, entry = _started(job, actor, now)
    inserts.insert(event)
    inserts.insert(entry)


def _started(job: Job, actor: AnyUser | None, now: datetime) -> tuple[JobEvent, AuditEntry]:
    """The run's ``started`` timeline event and audit entry, not yet written."""
    if job.agent:
        who = f"agent {job.agent}"
    elif job.queue.executor == Executor.SLURM:
        who = "Slurm"
    else:
        who = "the simulated fleet"
    event = JobEvent(
        job=job, at=now, type="started", message=f"Started by {who}.", data={"run": job.run}
    )
    entry = audit.job_entry(
        event_type=AuditEvent.JOB_STARTED,
        actor=actor,
        job=job,
        before=None,
        after={"run": job.run, "agent": job.agent},
        at=now,
    )
    return event, entry


@transaction.atomic
def runs_started(*, started: Sequence[tuple[int, int]], now: datetime) -> list[Job]:
    """The executor (no agent) reports several runs ``(job id, run)`` started, as
    ``run_report(kind="started")`` does one by one but with one statement per kind of
    write (the slurm executor's pass after a wave of submissions). A run that is no longer
    its job's running run is left out (the jobs reported are returned)."""
    reported: list[Job] = []
    events: list[JobEvent] = []
    entries: list[AuditEntry] = []
    for job in _locked_runs(started):
        # A start without progress: the run starts from its resume point now.
        job.last_heartbeat_at = now
        job.progress_at = now
        event, entry = _started(job, None, now)
        reported.append(job)
        events.append(event)
        entries.append(entry)
    Job.objects.filter(pk__in=[job.pk for job in reported]).update(
        last_heartbeat_at=now, progress_at=now
    )
    inserts.insert_many(events)
    inserts.insert_many(entries)
    return reported


def _locked_runs(runs: Sequence[tuple[int, int]]) -> list[Job]:
    """The jobs of ``runs`` ``(job id, run)`` whose running run is the one named, locked
    (in id order, as every multi-job lock here is taken)."""
    wanted = dict(runs)
    jobs = job_selectors.jobs_with_share([j for j in wanted if valid_id(j)], lock=True)
    return [job for job in jobs if job.run == wanted[job.pk] and job.state == JobState.RUNNING]


@transaction.atomic
def run_claim(
    *, actor: AnyUser, queue_id: int, agent: str, now: datetime, limit: int, start: bool = False
) -> list[Job]:
    """An agent takes the admitted, unclaimed runs of its queue (each run goes to one agent).

    ``start``: the agent starts each run as it claims it, so the claim also records the
    run's ``started`` report (one round trip per run fewer, and no start delay).
    """
    if not agent:
        raise ValidationFailed({"agent": ["name the agent"]})
    if not 1 <= limit <= MAX_CLAIM:
        raise ValidationFailed({"limit": [f"must be from 1 to {MAX_CLAIM}"]})
    jobs = list(
        Job.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("instance_type", "share__team", "plan")
        .filter(queue_id=queue_id, state=JobState.RUNNING, agent="")
        .order_by("run_started_at", "id")[:limit]
    )
    for job in jobs:
        job.agent = agent
        job.claimed_by_id = actor.pk if actor.is_authenticated else None
        job.claimed_at = now
        job.last_heartbeat_at = now
        job.save(update_fields=["agent", "claimed_by", "claimed_at", "last_heartbeat_at"])
        job_event(job, now, "claimed", f"Claimed by agent {agent}.", run=job.run, agent=agent)
        if start:
            _record_started(job, actor, now)
    return jobs


@transaction.atomic
def run_stop_acknowledged(
    *, actor: AnyUser | None, job_id: int, run: int, now: datetime, agent: str | None = None
) -> Job:
    """The agent that held a preempted run stopped it; the stop order is done."""
    job = _locked_job(job_id)
    _check_agent_queue(job, actor)
    if job.stop_requested_run != run:
        raise _run_conflict(job, f"no stop order is open for run {run} of job {job.pk}")
    _check_holder(job, actor, agent)
    job.stop_requested_run = None
    job.save(update_fields=["stop_requested_run"])
    job_event(job, now, "stopped", f"Agent stopped run {run}.", run=run)
    return job


@transaction.atomic
def run_declare_lost(
    *,
    job_id: int,
    now: datetime,
    explanation: str,
    run: int | None = None,
    rule: str = DecisionRule.HEARTBEAT_LOST,
) -> Job | None:
    """A run whose agent stopped reporting (or that Slurm no longer knows: ``rule``) is
    lost: requeue the job and free its capacity. ``run``, when given, must be current.

    Like a capacity loss, this is not the job yielding to anyone, so it does not count
    against the share's retry limit; work since the last checkpoint is lost.
    """
    job = lock_job(job_id, "share__team", "instance_type")
    if job.state != JobState.RUNNING or (run is not None and job.run != run):
        return None
    before = _snapshot(job)
    speed = job.instance_type.speed if job.instance_type_id and job.instance_type else 1.0
    lost = float(
        work.lost_work(work=current_work(job, now, speed=speed), checkpoint=job.checkpoint_work)
    )
    job.recomputed += lost
    job.work_done = job.checkpoint_work
    job.state = JobState.PENDING
    job.run_started_at = None
    job.progress_at = None
    job.agent = ""
    job.claimed_by_id = None
    job.borrowed = 0
    job.save(
        update_fields=[
            "recomputed",
            "work_done",
            "state",
            "run_started_at",
            "progress_at",
            "agent",
            "claimed_by",
            "borrowed",
        ]
    )
    job_event(job, now, "lost", explanation, lost_work=round(lost, 3))
    audit.record_job(
        event_type=AuditEvent.JOB_LOST,
        actor=None,
        job=job,
        before=before,
        after={**_snapshot(job), "rule": rule, "lost_work": round(lost, 3)},
        reason=explanation,
        at=now,
    )
    transaction.on_commit(lambda: metrics.count_executor_error("lost"))
    queue_changed(job.queue_id)
    return job


@transaction.atomic
def run_capacity_lost(*, job_id: int, run: int, now: datetime, explanation: str) -> Job | None:
    """The executor's backend lost the machines under a run (a Slurm node failed): the run
    is preempted as ``capacity_lost``, like a capacity drop (not counted against the
    share's retry limit), and the job requeued from its last checkpoint."""
    job = lock_job(job_id, "share__team", "instance_type", "queue")
    if job.state != JobState.RUNNING or job.run != run:
        return None
    speed = job.instance_type.speed if job.instance_type_id and job.instance_type else 1.0
    done = current_work(job, now, speed=speed)
    lost = float(work.lost_work(work=done, checkpoint=job.checkpoint_work))
    run_preempt(
        job=job,
        reason=DecisionRule.CAPACITY_LOST,
        by_job=None,
        lost_work=lost,
        saved_work=job.checkpoint_work,
        fail=False,
        counts_against_retries=False,
        share_versions={job.share.name: job.share.version},
        now=now,
        explanation=explanation,
    )
    queue_changed(job.queue_id)
    return job


def runs_declare_silent_lost(*, now: datetime, heartbeat_seconds: float) -> list[Job]:
    """Declare lost every agent run silent for 1.5 heartbeat intervals (one transaction
    per run, so one failure does not keep the others running)."""
    cutoff = now - timedelta(seconds=1.5 * heartbeat_seconds)
    silent = list(
        Job.objects.filter(
            queue__executor=Executor.AGENT,
            state=JobState.RUNNING,
            last_heartbeat_at__lt=cutoff,
        )
        .exclude(agent="")
        .values_list("id", "agent", "last_heartbeat_at")
    )
    lost = []
    for job_id, agent, last in silent:
        quiet = (now - last).total_seconds() if last is not None else 0.0
        job = run_declare_lost(
            job_id=job_id,
            now=now,
            explanation=(
                f"Agent {agent} sent no report for {quiet:.0f} s (heartbeat interval "
                f"{heartbeat_seconds:g} s): the run is declared lost and the job requeued."
            ),
        )
        if job is not None:
            lost.append(job)
    return lost
