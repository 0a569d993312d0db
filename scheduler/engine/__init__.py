"""Scheduling engine of one job queue: pure Python, no Django (docs/scheduling.md).

Reading order (each module names one part of docs/scheduling.md)
-----------------------------------------------------------------
1. :mod:`~scheduler.engine.model`: the plain data (types, shares, jobs, decisions).
2. :mod:`~scheduler.engine.accounting`: own / borrowed / idle / free, the one function
   the engine decides with and the pages show.
3. :mod:`~scheduler.engine.work`: work, checkpoints and lost work of a job;
   :mod:`~scheduler.engine.state`: the queue's state and indices: a ``Pool`` per type
   (usage, running jobs, RESERVE idle, borrowers), the victim key, the change clock, and
   a pool as it was at a cycle's start.
4. :mod:`~scheduler.engine.placement`: fits without preemption and the preference
   choice; the exact necessary conditions the index uses.
5. :mod:`~scheduler.engine.preemption`: victim order, greedy pick, minimal set,
   capacity lost.
6. :mod:`~scheduler.engine.candidates`: the incremental index: pending jobs in classes
   (type, share, count) in cycle order, and the proofs that a class cannot fit.
7. :mod:`~scheduler.engine.cycle`: a cycle (ordering, the skip rule, admit, preempt)
   walking only the classes a change may have helped; ``reference_cycle`` is the same
   rules over every pending job, what ``Engine(incremental=False)`` runs.
8. :mod:`~scheduler.engine.facade`: :class:`Engine`, the thin object callers use;
   :mod:`~scheduler.engine.explain` words the reasons from public accounting.
9. :mod:`~scheduler.engine.plans`: capacity plans (docs/scheduling.md#capacity-plans), a pool of
their
   own with its fit, victims and count drop; :mod:`~scheduler.engine.plan_life` their
   start, resize and end.
10. :mod:`~scheduler.engine.constraints`: interruption classes and constrained fallback
   (docs/scheduling.md): expected run time and cost of a preference, which preferences
   are eligible, and when a job times out for its deadline.

Public API
----------
Data: :class:`InstanceType` ``(name, capacity, speed=1, accelerated=None,
hourly_price=0)``, :class:`ShareConfig` ``(name, limits, policy=RESERVE,
borrow_limit=-1, in_share_preemption=False, preemption_retries=None)``, :class:`Job`,
:class:`Preference` ``(instance_type, count, plan=None)`` (a plan preference gives the
plan's type), :class:`Plan` ``(name, instance_type, count, share, start, end,
hourly_price=0)``, :class:`Decision` (``plan`` set for a run on a plan; ``kind`` a
:class:`DecisionKind`, ``rule`` a :class:`Rule`: StrEnums, equal to the strings of the
output), :class:`Reason`. A job's ``kind`` is ``training`` (the default) or ``processing``; only
training jobs of the plan's share may name a plan (``submit`` raises ValueError).
A job may also say ``may_borrow=False`` (never borrows), ``preemptible=False`` (never an
in-share ``priority`` victim), and give a ``deadline`` and a ``max_cost``; a preference
may give its expected ``runtime``. ``Engine(..., hour=3600)`` is the number of time
units in an hour (3,600,000 when times are milliseconds) for expected costs.

State and rules: :class:`Engine` ``(instance_types, shares, *, plans=())``

* ``submit(job)``, ``restore(jobs, now=None)`` (any state, for the live bridge; ``now``
  the instant it will schedule next)
* ``complete(job_id, now)``, ``cancel(job_id, now)`` -> decisions
* ``set_priority(job_id, priority)``, ``set_share(name, **fields)``,
  ``set_capacity(type, capacity, now)`` -> ``capacity_lost`` decisions
* ``report_progress(job_id, now, work_done, last_checkpoint=None)``
* ``add_plan(plan)``; ``set_plan(name, count, now)`` -> ``capacity_lost`` decisions;
  ``advance_plans(now)`` -> ``plan_ended`` decisions (and activates started plans)
* ``schedule(now)`` -> decisions of the cycles at ``now`` (run to a fixpoint), after
  ``advance_plans(now)`` if not yet done at ``now``
* ``timeouts(now)`` -> ``timed_out`` decisions (rule ``max_pending`` or ``deadline``);
  ``next_deadline()`` (max pending deadlines, deadline timeouts, plan starts and ends);
  ``next_eligibility_change()`` (when a preference next runs out of time)
* ``explain(job_id, now=None)`` -> one :class:`Reason` per preference, judged at ``now``
* ``plans``, ``plan_usage(name)`` -> :class:`PlanUsage` (count, usage, active, jobs):
  plan capacity apart from on-demand, which ``accounting`` never includes
* ``accounting(type)`` -> per-share limit/usage/own/borrowed/idle/free;
  ``type_account(type)`` the whole :class:`~scheduler.engine.accounting.TypeAccount`
* ``job(id)``, ``jobs()``, ``pending_jobs()``, ``pending_count()``, ``instance_types``,
  ``shares``, ``work_at``/``lost_work_at``/``finish_time``
* ``copy()`` -> independent engine for what-if previews

Order within one instant (the caller's job): completions, ``advance_plans(now)`` (plan
ends), actions (priority, share, capacity and plan changes, cancellations), submissions,
``schedule(now)``, ``timeouts(now)``.
"""

from scheduler.engine.constraints import HOUR_MS, HOUR_SECONDS
from scheduler.engine.facade import Engine, Placement, PlanUsage, ShareUsage
from scheduler.engine.model import (
    ELIGIBILITY_REASON_CODES,
    JOB_KINDS,
    PLAN_REASON_CODES,
    PROCESSING,
    REASON_CODES,
    TRAINING,
    UNLIMITED,
    Decision,
    DecisionKind,
    InstanceType,
    Job,
    JobState,
    Plan,
    Policy,
    Preference,
    Reason,
    Rule,
    ShareConfig,
    Work,
    default_accelerated,
    exact,
    plain,
    plan_pool,
)

__all__ = [
    "ELIGIBILITY_REASON_CODES",
    "HOUR_MS",
    "HOUR_SECONDS",
    "JOB_KINDS",
    "PLAN_REASON_CODES",
    "PROCESSING",
    "REASON_CODES",
    "TRAINING",
    "UNLIMITED",
    "Decision",
    "DecisionKind",
    "Engine",
    "InstanceType",
    "Job",
    "JobState",
    "Placement",
    "Plan",
    "PlanUsage",
    "Policy",
    "Preference",
    "Reason",
    "Rule",
    "ShareConfig",
    "ShareUsage",
    "Work",
    "default_accelerated",
    "exact",
    "plain",
    "plan_pool",
]
