"""Scheduling engine of one job queue: pure Python, no Django (DESIGN sections 2 to 4).

Public API
----------
Data (plain dataclasses, see :mod:`scheduler.engine.model`):

* :class:`InstanceType` ``(name, capacity, speed=1, accelerated=None, hourly_price=0)``
* :class:`ShareConfig` ``(name, limits, policy=RESERVE, borrow_limit=-1,
  in_share_preemption=False, preemption_retries=None)``
* :class:`Job` ``(id, share, priority, submitted_at, preferences, max_pending=None,
  checkpoint_interval=None, restart_overhead=0, duration=None, ...progress fields)``
* :class:`Preference` ``(instance_type, count)``
* :class:`Decision` what happened (admitted / preempted / failed / completed /
  cancelled / timed_out), :class:`Reason` why a job waits.

State and rules: :class:`Engine` ``(instance_types, shares)``

* ``submit(job)``, ``restore(jobs)`` (any state, for the live bridge)
* ``complete(job_id, now)``, ``cancel(job_id, now)`` -> decisions
* ``set_priority(job_id, priority)``, ``set_share(name, **fields)``,
  ``set_capacity(type, capacity, now)`` -> ``capacity_lost`` decisions
* ``report_progress(job_id, now, work_done, last_checkpoint=None)``
* ``schedule(now)`` -> decisions of the cycles at ``now`` (run to a fixpoint)
* ``timeouts(now)`` -> ``timed_out`` decisions; ``next_deadline()``
* ``explain(job_id)`` -> one :class:`Reason` per preference; ``choose(job_id)``
* ``accounting(type)`` -> per-share limit/usage/own/borrowed/idle/free
* ``copy()`` -> independent engine for what-if previews

Order within one instant (the caller's job): completions, actions (priority, share,
capacity changes, cancellations), submissions, ``schedule(now)``, ``timeouts(now)``.
"""

from scheduler.engine.facade import Engine, Placement, ShareUsage
from scheduler.engine.model import (
    REASON_CODES,
    UNLIMITED,
    Decision,
    InstanceType,
    Job,
    JobState,
    Policy,
    Preference,
    Reason,
    ShareConfig,
    Work,
    default_accelerated,
    exact,
    plain,
)

__all__ = [
    "REASON_CODES",
    "UNLIMITED",
    "Decision",
    "Engine",
    "InstanceType",
    "Job",
    "JobState",
    "Placement",
    "Policy",
    "Preference",
    "Reason",
    "ShareConfig",
    "ShareUsage",
    "Work",
    "default_accelerated",
    "exact",
    "plain",
]
