"""The apply phase: the engine's decisions written through the run services
(``services/runs.py``: ``runs_admit``, ``run_preempt``, ``run_time_out``, ``run_complete``),
each with the explanation in words that the job's timeline shows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from governance.models import DecisionRule, Job
from governance.services import runs
from scheduler import engine as eng
from scheduler.cycle.snapshot import MS, QueueSnapshot
from scheduler.engine import accounting, exposure


def complete_finished(snapshot: QueueSnapshot) -> int:
    """Complete the runs the executor finished by itself (``snapshot.completions``), in
    the order they finished, in one batch; returns how many (a run that is no longer its
    job's running run, cancelled since it was read, is left out)."""
    finished = sorted(snapshot.completions, key=lambda item: (item[1], item[0].pk))
    if not finished:
        return 0
    done = runs.runs_complete(
        done=[(job.pk, job.run) for job, _ in finished],
        now=snapshot.now,
        finished={job.pk: at for job, at in finished},
    )
    return len(done)


def apply(snapshot: QueueSnapshot, decisions: Iterable[eng.Decision]) -> int:
    """Apply engine decisions through the services; returns how many were applied."""
    decisions = list(decisions)
    now = snapshot.now
    applied = 0
    failed = {d.job for d in decisions if d.kind == eng.DecisionKind.FAILED}
    snapshot.jobs.prefetch({d.job for d in decisions} | {d.by for d in decisions if d.by})
    # Admissions are written in batches (``runs.runs_admit``), each flushed before the
    # next decision of another kind: the trail keeps the engine's order.
    admissions: list[runs.Admission] = []
    lenders = _Lenders(snapshot)

    def flush() -> None:
        if admissions:
            runs.runs_admit(admissions=admissions, now=now)
            admissions.clear()

    for d in decisions:
        job = snapshot.jobs[d.job]
        if d.kind == eng.DecisionKind.ADMITTED:
            admissions.append(_admission(snapshot, job, d, lenders))
            applied += 1
            continue
        if d.kind not in (eng.DecisionKind.PREEMPTED, eng.DecisionKind.TIMED_OUT):
            continue  # "failed" is applied with its "preempted"
        flush()
        if d.kind == eng.DecisionKind.PREEMPTED:
            _preempt(snapshot, job, d, fail=d.job in failed)
        else:  # "timed_out"
            runs.run_time_out(
                job=job,
                now=now,
                explanation=_timeout_text(snapshot, job, d),
                reason=d.rule or "max_pending",
            )
        applied += 1
    flush()
    return applied


class _Lenders:
    """Whose capacity a borrowing admission's share holds at the end of the instant,
    worked out once per apply and only when something borrowed."""

    def __init__(self, snapshot: QueueSnapshot) -> None:
        self.snapshot = snapshot
        self.lending: dict[str, list[accounting.Lending[str]]] | None = None

    def __call__(self, share_key: str, type_name: str) -> list[dict[str, Any]]:
        if self.lending is None:
            self.lending = exposure.lending_now(self.snapshot.engine)
        return [
            {
                "share": row.lender,
                "team": self.snapshot.shares[row.lender].team.name,
                "instances": row.count,
            }
            if row.lender is not None
            else {"source": row.source, "instances": row.count}
            for row in self.lending.get(type_name, [])
            if row.borrower == share_key
        ]


def _admission(
    snapshot: QueueSnapshot, job: Job, d: eng.Decision, lenders: _Lenders
) -> runs.Admission:
    assert d.instance_type is not None and d.count is not None
    if d.plan is not None:
        rule = DecisionRule.PLAN
    else:
        rule = DecisionRule.BORROW if d.borrowed else DecisionRule.OWN
    return runs.Admission(
        job=job,
        instance_type_id=snapshot.type_ids[d.instance_type],
        instance_type_name=d.instance_type,
        count=d.count,
        preference=d.preference or 0,
        borrowed=d.borrowed or 0,
        rule=rule,
        plan_id=snapshot.plans[d.plan].pk if d.plan is not None else None,
        plan_name=d.plan,
        share_versions=_versions(snapshot, job.share.name),
        explanation=_admission_text(snapshot, job, d),
        lent_by=lenders(job.share.name, d.instance_type) if d.borrowed else [],
    )


def _preempt(snapshot: QueueSnapshot, job: Job, d: eng.Decision, *, fail: bool) -> None:
    by = snapshot.jobs.get(d.by) if d.by else None
    runs.run_preempt(
        job=job,
        reason=d.rule or "",
        by_job=by,
        lost_work=float(d.lost_work or 0) / MS,
        saved_work=float(snapshot.engine.job(d.job).last_checkpoint) / MS,
        fail=fail,
        # Lost capacity and plan ends are nobody's doing (docs/scheduling.md).
        counts_against_retries=d.rule not in (DecisionRule.CAPACITY_LOST, DecisionRule.PLAN_ENDED),
        share_versions=_versions(snapshot, job.share.name, by.share.name if by else None),
        now=snapshot.now,
        explanation=_preemption_text(snapshot, job, d),
    )


def _timeout_text(snapshot: QueueSnapshot, job: Job, d: eng.Decision) -> str:
    wait = (snapshot.now - job.submitted_at).total_seconds()
    if d.rule == "deadline":
        if job.deadline is None:
            return "Timed out: no preference can finish by its deadline any more."
        return (
            "Timed out: no preference can finish by its deadline "
            f"{job.deadline:%Y-%m-%d %H:%M} UTC any more (waited {wait:.0f} s)."
        )
    return (
        f"Timed out: waited {wait:.0f} s without starting, past its max pending "
        f"time of {job.max_pending} s."
    )


def _versions(snapshot: QueueSnapshot, *share_keys: str | None) -> dict[str, int]:
    out = {}
    for key in share_keys:
        if key is not None and key in snapshot.shares:
            share = snapshot.shares[key]
            out[share.name] = share.version
    return out


def _admission_text(snapshot: QueueSnapshot, job: Job, d: eng.Decision) -> str:
    share = job.share
    if d.plan is not None:
        plan = snapshot.plans[d.plan]
        return (
            f"Started on {d.count} x {d.instance_type} of capacity plan {d.plan} "
            f"({_choice(d.preference)}), {share.name}'s own instances until "
            f"{plan.end:%Y-%m-%d %H:%M} UTC."
        )
    limit = snapshot.engine.share_limit(job.share.name, d.instance_type or "")
    where = f"{d.count} x {d.instance_type} (preference {(d.preference or 0) + 1})"
    if d.borrowed:
        return (
            f"Started on {where}, borrowing {d.borrowed} beyond {share.name}'s limit of "
            f"{limit} from idle capacity others lend."
        )
    return f"Started on {where} within {share.name}'s own limit of {limit}."


def _choice(index: int | None) -> str:
    words = ("first", "second", "third", "fourth", "fifth")
    position = index or 0
    return f"{words[position]} choice" if position < len(words) else f"choice {position + 1}"


def _preemption_text(snapshot: QueueSnapshot, job: Job, d: eng.Decision) -> str:
    if d.rule == DecisionRule.PLAN_ENDED:
        return (
            f"Stopped: capacity plan {d.plan} ended; the job waits again and may start on "
            "its other preferences (not counted against the share's retries)."
        )
    if d.rule == DecisionRule.CAPACITY_LOST and d.plan is not None:
        plan = snapshot.plans.get(d.plan)
        count = plan.count if plan is not None else "fewer"
        return (
            f"Stopped: capacity plan {d.plan} was resized to {count}, below what was "
            "running on it (not counted against the share's retries)."
        )
    if d.rule == DecisionRule.CAPACITY_LOST:
        return (
            f"Stopped: the queue's {d.instance_type} capacity dropped to "
            f"{snapshot.capacity.get(d.instance_type or '', 0)}, below what was running."
        )
    by = snapshot.jobs.get(d.by or "")
    by_name = by.name if by else d.by
    if d.rule == DecisionRule.RECLAIM and by is not None:
        owner = by.share
        return (
            f"Stopped: {owner.team.name}'s share {owner.name} took back its {d.instance_type} "
            f"for job {by_name}; this run was on borrowed capacity."
        )
    priority = by.priority if by else "?"
    return (
        f"Stopped: job {by_name} of the same share has a higher priority "
        f"({priority} > {job.priority}) and the share allows in-share preemption."
    )
