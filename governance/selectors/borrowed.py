"""Entitled and borrowed, in words: which part of a job's running was on borrowed
capacity, how exposed a run on borrowed capacity is, and a pending job's start on its
share's entitlement alone (docs/insight.md, "Entitled and borrowed").

Progress comes from the job's timeline: each ``admitted`` event starts a run that lasts
until the job's next ``preempted``, ``completed``, ``failed``, ``cancelled`` or ``lost``
event (or now, while it runs), as the signals count runs (docs/signals.md). A run is on
borrowed capacity when its admission borrowed (``borrowed`` above 0), and names whose
capacity its share then held (``lent_by``, recorded at admission by the scheduler).
The engine readings come through ``selectors.scheduling``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from governance.models import Job, JobEvent, JobState
from governance.selectors import scheduling
from governance.templatetags.figures import duration

RUN_ENDS = frozenset({"preempted", "completed", "failed", "cancelled", "lost"})
UNOWNED_WORDS = "capacity no share owns"


@dataclass
class BorrowedProgress:
    """Seconds the job ran, those on borrowed capacity, and who lent it."""

    run_seconds: float = 0.0
    borrowed_seconds: float = 0.0
    runs: int = 0
    borrowed_runs: int = 0
    lent_by: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.runs:
            return ""
        total = duration(self.run_seconds)
        if not self.borrowed_runs:
            return f"All of its {total} of running were on its share's own entitlement."
        text = (
            f"{duration(self.borrowed_seconds)} of its {total} of running "
            f"{'was' if self.borrowed_runs == 1 else 'were'} on borrowed capacity"
        )
        if self.lent_by:
            text += ", lent by " + ", ".join(self.lent_by)
        return text + "."

    def as_json(self) -> dict[str, Any]:
        return {
            "run_seconds": round(self.run_seconds, 3),
            "borrowed_seconds": round(self.borrowed_seconds, 3),
            "runs": self.runs,
            "borrowed_runs": self.borrowed_runs,
            "lent_by": self.lent_by,
            "summary": self.summary(),
        }


def _lender_words(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return None
    if entry.get("share"):
        team = entry.get("team")
        return f"{team} (share {entry['share']})" if team else f"share {entry['share']}"
    return UNOWNED_WORDS if entry.get("source") == "unowned" else None


def borrowed_progress(events: list[JobEvent], state: str, now: datetime) -> BorrowedProgress:
    """The runs of a job's ``events`` (oldest first), split by whether their admission
    borrowed; a run still going (the job ``RUNNING``) lasts until ``now``."""
    out = BorrowedProgress()
    start: datetime | None = None
    borrowed = False

    def close(at: datetime) -> None:
        seconds = max(0.0, (at - start).total_seconds()) if start is not None else 0.0
        out.runs += 1
        out.run_seconds += seconds
        if borrowed:
            out.borrowed_runs += 1
            out.borrowed_seconds += seconds

    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == "admitted":
            if start is not None:
                close(event.at)
            start, borrowed = event.at, bool(data.get("borrowed"))
            if borrowed:
                for entry in data.get("lent_by") or []:
                    words = _lender_words(entry)
                    if words and words not in out.lent_by:
                        out.lent_by.append(words)
        elif event.type in RUN_ENDS and start is not None:
            close(event.at)
            start = None
    if start is not None and state == JobState.RUNNING:
        close(now)
    return out


def exposure_words(exposure: dict[str, Any]) -> str:
    """One sentence on a run's exposure: who lent, what they wait for, what may happen."""
    lenders = []
    for lender in exposure["lenders"]:
        if lender["share_name"] is None:
            lenders.append(
                f"{lender['instances']} of {UNOWNED_WORDS}"
                if lender["source"] == "unowned"
                else f"{lender['instances']} beyond what anyone lends"
            )
            continue
        waiting = (
            f"{lender['waiting_jobs']} job{'s' if lender['waiting_jobs'] != 1 else ''} "
            f"({lender['waiting_instances']} instances) waiting there"
            if lender["waiting_jobs"]
            else "nothing waiting there"
        )
        lenders.append(
            f"{lender['instances']} lent by {lender['team_name']} (share "
            f"{lender['share_name']}, {waiting})"
        )
    head = (
        f"Runs on borrowed capacity: its share holds {exposure['share_borrowed']} \u00d7 "
        f"{exposure['instance_type']} beyond its limit: {'; '.join(lenders)}."
    )
    if exposure["status"] == "reclaim_imminent":
        wanting = ", ".join(exposure["wanted_back_by"])
        tail = "Reclaim imminent: " + (
            f"share {wanting} has waiting work that fits its own idle entitlement."
            if wanting
            else "the next cycle takes this capacity back."
        )
    else:
        tail = "May be reclaimed as soon as an owner's work needs its entitlement back."
    return f"{head} {tail}"


def entitled_words(entitled: dict[str, Any] | None) -> str:
    """What the start on the share's entitlement alone is, when it is no time."""
    if entitled is None:
        return ""
    if entitled["never"]:
        return "never on its own entitlement: no preference fits its share's limits"
    if entitled["estimated_start"] is None:
        return (
            "times out before it starts on its own entitlement"
            if entitled["times_out"]
            else "no start found on its own entitlement"
        )
    return ""


def job_view(job: Job, now: datetime) -> dict[str, Any]:
    """What the job page and explain show of entitled and borrowed: ``entitled`` (a
    pending job's start on its share's entitlement alone, with ``words`` when it is no
    time, and ``basis``), ``exposure`` (a running job on borrowed capacity, with
    ``summary``) and ``borrowed_progress``. Expects ``job.events`` prefetched or
    fetchable."""
    entitled = None
    exposure = None
    if job.state == JobState.PENDING:
        found, basis = scheduling.entitled_forecast_jobs(job.queue_id, [job.pk])
        value = found.get(job.pk)
        if value is not None:
            entitled = {**value, "words": entitled_words(value), "basis": basis}
    elif job.state == JobState.RUNNING:
        value = scheduling.exposure_jobs(job.queue_id, [job.pk]).get(job.pk)
        if value is not None:
            exposure = {**value, "summary": exposure_words(value)}
    progress = borrowed_progress(list(job.events.all()), job.state, now)
    return {"entitled": entitled, "exposure": exposure, "borrowed_progress": progress}
