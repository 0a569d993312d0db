"""Scenario runner: ``python -m scheduler.simulate FILE.json [--explain] [--check]``.

Runs the engine over a scenario (docs/scenarios.md) with no
database and prints the JSON result. It is a thin event loop over
:class:`scheduler.engine.Engine`, the same object the live scheduler drives, so a
scenario exercises exactly the production rules.

Exit status: 0 on success; 2 for an invalid scenario (one ``field: problem`` line per
problem on stderr); 1 with ``--check`` when the output does not match the scenario's
``expect`` / ``expect_jobs`` / ``expect_pending`` (one line per mismatch on stderr).
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.engine import (
    HOUR_MS,
    HOUR_SECONDS,
    JOB_KINDS,
    TRAINING,
    Decision,
    DecisionKind,
    Engine,
    InstanceType,
    Job,
    JobState,
    Plan,
    Policy,
    Preference,
    ShareConfig,
    exact,
    plain,
)
from scheduler.gcpause import gc_paused

ADMITTED = DecisionKind.ADMITTED

MAX_SHARES = 20
MAX_LIMITS = 5
MAX_PREFERENCES = 5
MAX_PRIORITY = 9999

_TOP_KEYS = {
    "instance_types",
    "shares",
    "plans",
    "jobs",
    "actions",
    "until",
    "version",
    "description",
    "time_unit",
}
_TYPE_KEYS = {"name", "capacity", "accelerated", "speed", "hourly_price"}
_SHARE_KEYS = {
    "name",
    "policy",
    "borrow_limit",
    "limits",
    "in_share_preemption",
    "preemption_retries",
}
_JOB_KEYS = {
    "id",
    "share",
    "submit_at",
    "priority",
    "preferences",
    "count",
    "duration",
    "checkpoint_interval",
    "restart_overhead",
    "max_pending",
    "kind",
    "may_borrow",
    "preemptible",
    "deadline",
    "max_cost",
}
_PREFERENCE_KEYS = {"instance_type", "count", "plan", "runtime"}
_PLAN_KEYS = {"name", "instance_type", "count", "share", "start", "end", "hourly_price"}
_ACTION_KEYS = {
    "set_priority": {"at", "type", "job", "priority"},
    "set_share": {"at", "type", "share"} | (_SHARE_KEYS - {"name"}),
    "set_capacity": {"at", "type", "instance_type", "capacity"},
    "cancel": {"at", "type", "job"},
    "set_plan": {"at", "type", "plan", "count"},
}


class ScenarioError(Exception):
    """An invalid scenario; ``problems`` holds one ``field: message`` line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# ---------------------------------------------------------------------------- validation


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json(value: object) -> str:
    """What JSON calls ``value``'s type, for a message."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_ABSENT = object()
"""A field the object does not have (None is a value: JSON's null)."""


class _Validator:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def name(self, path: str, key: str, value: object, names: Collection[str], what: str) -> bool:
        """``value`` (field ``key`` of the object at ``path``) names one of ``names``
        (``what`` they are: "share", "plan", ...); required. Any JSON value may arrive,
        so a list or an object is reported as such before it is looked up (it cannot be,
        among names)."""
        if isinstance(value, str) and value in names:
            return True  # the common case, before the field's path is even spelt out
        where = f"{path}.{key}"
        if value is None:
            self.add(where, "required")
        elif not isinstance(value, str):
            article = "an" if what[0] in "aeiou" else "a"
            self.add(where, f"must be the name of {article} {what} (a string), not {_json(value)}")
        elif value not in names:
            self.add(where, f"unknown {what} {value!r}")
        else:
            return True
        return False

    def unknown(self, path: str, obj: Mapping[str, Any], allowed: set[str]) -> None:
        if allowed.issuperset(obj):
            return  # one test for the common case (a 100,000-job file asks it 300,000 times)
        for key in obj:
            if key not in allowed:
                self.add(f"{path}.{key}" if path else key, "unknown field")

    def int_field(
        self,
        path: str,
        obj: Mapping[str, Any],
        key: str,
        *,
        required: bool = False,
        minimum: int | None = 0,
        maximum: int | None = None,
        nullable: bool = False,
    ) -> None:
        value = obj.get(key, _ABSENT)
        if (
            type(value) is int
            and (minimum is None or value >= minimum)
            and (maximum is None or value <= maximum)
        ):
            return  # the common case, before the field's path is even spelt out
        if (value is _ABSENT and not required) or (value is None and nullable):
            return  # an optional field left out, or null where null is allowed
        where = f"{path}.{key}" if path else key
        if value is _ABSENT:
            if required:
                self.add(where, "required")
            return
        if value is None:
            if not nullable:
                self.add(where, "must not be null")
            return
        if not _is_int(value):
            self.add(where, "must be an integer")
            return
        if minimum is not None and value < minimum:
            self.add(where, f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            self.add(where, f"must be at most {maximum}")

    def number_field(
        self,
        path: str,
        obj: Mapping[str, Any],
        key: str,
        *,
        required: bool = False,
        positive: bool = True,
        nullable: bool = False,
    ) -> None:
        value = obj.get(key, _ABSENT)
        if (type(value) is int or type(value) is float) and (value > 0 if positive else value >= 0):
            return  # the common case, before the field's path is even spelt out
        if (value is _ABSENT and not required) or (value is None and nullable):
            return  # an optional field left out, or null where null is allowed
        where = f"{path}.{key}"
        if value is _ABSENT:
            if required:
                self.add(where, "required")
            return
        if value is None:
            if not nullable:
                self.add(where, "must not be null")
            return
        if not _is_number(value):
            self.add(where, "must be a number")
        elif positive and not value > 0:
            self.add(where, "must be greater than 0")
        elif not positive and value < 0:
            self.add(where, "must not be negative")

    def bool_field(self, path: str, obj: Mapping[str, Any], key: str) -> None:
        if key in obj and not isinstance(obj[key], bool):
            self.add(f"{path}.{key}", "must be true or false")

    def share_fields(self, path: str, obj: Mapping[str, Any], types: set[str]) -> None:
        if "policy" in obj and not (
            isinstance(obj["policy"], str) and obj["policy"] in {p.value for p in Policy}
        ):
            self.add(
                f"{path}.policy",
                f"must be one of RESERVE, LEND, LEND_AND_BORROW (got {obj['policy']!r})",
            )
        if "borrow_limit" in obj:
            value = obj["borrow_limit"]
            if not _is_int(value):
                self.add(f"{path}.borrow_limit", "must be an integer (-1 for unlimited)")
            elif value < -1:
                self.add(f"{path}.borrow_limit", "must be -1 (unlimited) or at least 0")
        if "limits" in obj:
            limits = obj["limits"]
            if not isinstance(limits, dict):
                self.add(f"{path}.limits", "must be an object of instance type to count")
            else:
                if not 1 <= len(limits) <= MAX_LIMITS:
                    self.add(f"{path}.limits", f"must have 1 to {MAX_LIMITS} entries")
                for type_name, count in limits.items():
                    where = f"{path}.limits.{type_name}"
                    if type_name not in types:
                        self.add(where, f"unknown instance type {type_name!r}")
                    if not _is_int(count) or count < 0:
                        self.add(where, "must be an integer of at least 0")
        self.bool_field(path, obj, "in_share_preemption")
        self.int_field(path, obj, "preemption_retries", nullable=True)


def validate(data: object) -> list[str]:
    """Every problem of a scenario, one ``field: message`` line each (empty: valid)."""
    v = _Validator()
    if not isinstance(data, dict):
        return ["(top level): must be a JSON object"]
    for key in data:
        if key not in _TOP_KEYS and not key.startswith("expect"):
            v.add(key, "unknown field")
    if "version" in data and data["version"] != 1:
        v.add("version", f"unsupported version {data['version']!r} (only 1)")
    types = _validate_types(v, data)
    shares = _validate_shares(v, data, types)
    plans = _validate_plans(v, data, types, shares)
    job_ids = _validate_jobs(v, data, types, shares, plans)
    _validate_actions(v, data, types, shares, plans, job_ids)
    v.int_field("", data, "until", nullable=True)
    return v.problems


def _validate_types(v: _Validator, data: Mapping[str, Any]) -> set[str]:
    """Check ``instance_types``; return the names of the valid ones."""
    types: set[str] = set()
    raw_types = data.get("instance_types")
    if not isinstance(raw_types, list):
        v.add("instance_types", "required list")
        raw_types = []
    for i, item in enumerate(raw_types):
        path = f"instance_types[{i}]"
        if not isinstance(item, dict):
            v.add(path, "must be an object")
            continue
        v.unknown(path, item, _TYPE_KEYS)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            v.add(f"{path}.name", "required non-empty string")
        elif name in types:
            v.add(f"{path}.name", f"duplicate instance type {name!r}")
        else:
            types.add(name)
        v.int_field(path, item, "capacity", required=True)
        v.bool_field(path, item, "accelerated")
        v.number_field(path, item, "speed")
        v.number_field(path, item, "hourly_price", positive=False)
    return types


def _validate_shares(v: _Validator, data: Mapping[str, Any], types: set[str]) -> set[str]:
    """Check ``shares``; return the names of the valid ones."""
    shares: set[str] = set()
    raw_shares = data.get("shares")
    if not isinstance(raw_shares, list):
        v.add("shares", "required list")
        raw_shares = []
    if len(raw_shares) > MAX_SHARES:
        v.add("shares", f"at most {MAX_SHARES} shares per queue")
    for i, item in enumerate(raw_shares):
        path = f"shares[{i}]"
        if not isinstance(item, dict):
            v.add(path, "must be an object")
            continue
        v.unknown(path, item, _SHARE_KEYS)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            v.add(f"{path}.name", "required non-empty string")
        elif name in shares:
            v.add(f"{path}.name", f"duplicate share {name!r}")
        else:
            shares.add(name)
        if "limits" not in item:
            v.add(f"{path}.limits", "required")
        v.share_fields(path, item, types)
    return shares


def _validate_jobs(
    v: _Validator,
    data: Mapping[str, Any],
    types: set[str],
    shares: set[str],
    plans: Mapping[str, str],
) -> set[str]:
    """Check ``jobs``; return the ids of the valid ones (as strings)."""
    job_ids: set[str] = set()
    raw_jobs = data.get("jobs")
    if not isinstance(raw_jobs, list):
        v.add("jobs", "required list")
        raw_jobs = []
    for i, item in enumerate(raw_jobs):
        path = f"jobs[{i}]"
        if not isinstance(item, dict):
            v.add(path, "must be an object")
            continue
        v.unknown(path, item, _JOB_KEYS)
        job_id = item.get("id")
        if not (isinstance(job_id, str) and job_id) and not _is_int(job_id):
            v.add(f"{path}.id", "required non-empty string")
        elif str(job_id) in job_ids:
            v.add(f"{path}.id", f"duplicate job id {job_id!r}")
        else:
            job_ids.add(str(job_id))
        share = item.get("share")
        v.name(path, "share", share, shares, "share")
        v.int_field(path, item, "submit_at", required=True)
        v.int_field(path, item, "priority", required=True, maximum=MAX_PRIORITY)
        v.number_field(path, item, "duration")
        v.number_field(path, item, "checkpoint_interval", nullable=True)
        v.int_field(path, item, "restart_overhead")
        v.int_field(path, item, "max_pending", nullable=True)
        v.bool_field(path, item, "may_borrow")
        v.bool_field(path, item, "preemptible")
        v.int_field(path, item, "deadline", nullable=True)
        v.number_field(path, item, "max_cost", positive=False, nullable=True)
        kind = item.get("kind", TRAINING)
        if kind not in JOB_KINDS:
            v.add(f"{path}.kind", f"must be one of {', '.join(JOB_KINDS)} (got {kind!r})")
        if "count" in item:
            v.int_field(path, item, "count", minimum=1)
        _validate_preferences(v, path, item, types, plans, share, kind)
    return job_ids


def _validate_preferences(
    v: _Validator,
    path: str,
    job: Mapping[str, Any],
    types: set[str],
    plans: Mapping[str, str],
    share: object,
    kind: object,
) -> None:
    """Check a job's ``preferences`` (a count on each, or one job-level count for all)."""
    common = "count" in job
    prefs = job.get("preferences")
    if not isinstance(prefs, list) or not 1 <= len(prefs) <= MAX_PREFERENCES:
        v.add(f"{path}.preferences", f"required list of 1 to {MAX_PREFERENCES} preferences")
        return
    for k, pref in enumerate(prefs):
        ppath = f"{path}.preferences[{k}]"
        if not isinstance(pref, dict):
            v.add(ppath, "must be an object")
            continue
        v.unknown(ppath, pref, _PREFERENCE_KEYS)
        v.int_field(ppath, pref, "runtime", minimum=1, nullable=True)
        type_name = pref.get("instance_type")
        if "plan" in pref:
            _validate_plan_preference(v, ppath, pref, plans, share, kind)
        else:
            v.name(ppath, "instance_type", type_name, types, "instance type")
        if "count" in pref:
            if common:
                v.add(
                    f"{ppath}.count",
                    "job-level count and per-preference counts must not be mixed",
                )
            else:
                v.int_field(ppath, pref, "count", minimum=1)
        elif not common:
            v.add(f"{ppath}.count", "required (or give a job-level count for all)")


def _validate_actions(
    v: _Validator,
    data: Mapping[str, Any],
    types: set[str],
    shares: set[str],
    plans: Mapping[str, str],
    job_ids: set[str],
) -> None:
    """Check ``actions`` (optional): each of a known type, naming known things."""
    raw_actions = data.get("actions", [])
    if raw_actions is None:
        raw_actions = []
    if not isinstance(raw_actions, list):
        v.add("actions", "must be a list")
        raw_actions = []
    for i, item in enumerate(raw_actions):
        path = f"actions[{i}]"
        if not isinstance(item, dict):
            v.add(path, "must be an object")
            continue
        v.int_field(path, item, "at", required=True)
        kind = item.get("type")
        if not isinstance(kind, str) or kind not in _ACTION_KEYS:
            v.add(f"{path}.type", f"must be one of {', '.join(sorted(_ACTION_KEYS))}")
            continue
        v.unknown(path, item, _ACTION_KEYS[kind])
        if kind in ("set_priority", "cancel"):
            if item.get("job") is None:
                v.add(f"{path}.job", "required")
            elif str(item["job"]) not in job_ids:
                v.add(f"{path}.job", f"unknown job {item['job']!r}")
        if kind == "set_priority":
            v.int_field(path, item, "priority", required=True, maximum=MAX_PRIORITY)
        elif kind == "set_share":
            v.name(path, "share", item.get("share"), shares, "share")
            v.share_fields(path, item, types)
        elif kind == "set_capacity":
            v.name(path, "instance_type", item.get("instance_type"), types, "instance type")
            v.int_field(path, item, "capacity", required=True)
        elif kind == "set_plan":
            v.name(path, "plan", item.get("plan"), plans, "plan")
            v.int_field(path, item, "count", required=True)


def _validate_plans(
    v: _Validator, data: Mapping[str, Any], types: set[str], shares: set[str]
) -> dict[str, str]:
    """Check the top-level ``plans`` (docs/scheduling.md#capacity-plans); return plan name ->
    share."""
    plans: dict[str, str] = {}
    raw_plans = data.get("plans", [])
    if raw_plans is None:
        raw_plans = []
    if not isinstance(raw_plans, list):
        v.add("plans", "must be a list")
        raw_plans = []
    for i, item in enumerate(raw_plans):
        path = f"plans[{i}]"
        if not isinstance(item, dict):
            v.add(path, "must be an object")
            continue
        v.unknown(path, item, _PLAN_KEYS)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            v.add(f"{path}.name", "required non-empty string")
            name = None
        elif name in plans:
            v.add(f"{path}.name", f"duplicate plan {name!r}")
            name = None
        v.name(path, "instance_type", item.get("instance_type"), types, "instance type")
        share = item.get("share")
        v.name(path, "share", share, shares, "share")
        v.int_field(path, item, "count", required=True)
        v.int_field(path, item, "start", required=True)
        v.int_field(path, item, "end", required=True)
        start, end = item.get("start"), item.get("end")
        if isinstance(start, int) and isinstance(end, int) and _is_int(end) and end <= start:
            v.add(f"{path}.end", f"must be after start ({start})")
        v.number_field(path, item, "hourly_price", positive=False)
        if name is not None:
            plans[name] = share if isinstance(share, str) else ""
    return plans


def _validate_plan_preference(
    v: _Validator,
    ppath: str,
    pref: Mapping[str, Any],
    plans: Mapping[str, str],
    share: object,
    kind: object,
) -> None:
    """A preference ``{"plan", "count"}``: a known plan of the job's share, named by a
    training job, without ``instance_type`` (it has the plan's type)."""
    if "instance_type" in pref:
        v.add(f"{ppath}.instance_type", "must not be given with a plan (it has the plan's type)")
    name = pref["plan"]
    if not v.name(ppath, "plan", name, plans, "plan"):
        pass
    elif kind != TRAINING:
        v.add(f"{ppath}.plan", f"only training jobs may name a plan (this job is {kind!r})")
    elif plans[name] != share:
        v.add(f"{ppath}.plan", f"plan {name!r} belongs to share {plans[name]!r}, not {share!r}")


# ---------------------------------------------------------------------------- running


@dataclass(slots=True)
class _Spec:
    index: int
    raw_id: object
    job: Job


def _build(data: Mapping[str, Any], incremental: bool = True) -> tuple[Engine, list[_Spec]]:
    types = [
        InstanceType(
            name=t["name"],
            capacity=t["capacity"],
            speed=t.get("speed", 1),
            accelerated=t.get("accelerated"),
            hourly_price=t.get("hourly_price", 0.0),
        )
        for t in data["instance_types"]
    ]
    shares = [
        ShareConfig(
            name=s["name"],
            limits=dict(s["limits"]),
            policy=Policy(s.get("policy", "RESERVE")),
            borrow_limit=s.get("borrow_limit", -1),
            in_share_preemption=s.get("in_share_preemption", False),
            preemption_retries=s.get("preemption_retries"),
        )
        for s in data["shares"]
    ]
    plans = [
        Plan(
            name=p["name"],
            instance_type=p["instance_type"],
            count=p["count"],
            share=p["share"],
            start=p["start"],
            end=p["end"],
            hourly_price=p.get("hourly_price", 0.0),
        )
        for p in data.get("plans") or []
    ]
    plan_types = {plan.name: plan.instance_type for plan in plans}
    specs = []
    # one Preference object per distinct option (they are frozen): a large trace repeats
    # a few dozen of them hundreds of thousands of times
    known: dict[tuple[str, int, str | None, int | None], Preference] = {}
    for index, raw in enumerate(data["jobs"]):
        common = raw.get("count")
        prefs = []
        for p in raw["preferences"]:
            option = (
                plan_types[p["plan"]] if "plan" in p else p["instance_type"],
                p["count"] if common is None else common,
                p.get("plan"),
                p.get("runtime"),
            )
            pref = known.get(option)
            if pref is None:
                pref = known[option] = Preference(*option)
            prefs.append(pref)
        interval = raw.get("checkpoint_interval")
        duration = raw.get("duration")
        max_cost = raw.get("max_cost")
        job = Job(
            id=str(raw["id"]),
            share=raw["share"],
            priority=raw["priority"],
            submitted_at=raw["submit_at"],
            preferences=tuple(prefs),
            max_pending=raw.get("max_pending"),
            checkpoint_interval=exact(interval) if interval is not None else None,
            restart_overhead=raw.get("restart_overhead", 0),
            duration=exact(duration) if duration is not None else None,
            kind=raw.get("kind", TRAINING),
            order=index,
            may_borrow=raw.get("may_borrow", True),
            preemptible=raw.get("preemptible", True),
            deadline=raw.get("deadline"),
            max_cost=exact(max_cost) if max_cost is not None else None,
        )
        specs.append(_Spec(index, raw["id"], job))
    hour = HOUR_MS if data.get("time_unit") == "ms" else HOUR_SECONDS
    return Engine(types, shares, plans=plans, incremental=incremental, hour=hour), specs


@gc_paused()
def run(
    data: Mapping[str, Any], *, explain: bool = False, incremental: bool = True
) -> dict[str, Any]:
    """Run a valid scenario and return the result of docs/scenarios.md.

    Raises :class:`ScenarioError` if the scenario is invalid. With ``explain`` the
    ``pending`` map gives ``{preference, reason, message}`` objects; otherwise it gives
    the reason codes alone. ``incremental=False`` is for tests (see ``Engine``).
    """
    problems = validate(data)
    if problems:
        raise ScenarioError(problems)
    engine, specs = _build(data, incremental)
    by_id = {spec.job.id: spec for spec in specs}
    raw_ids = {spec.job.id: spec.raw_id for spec in specs}
    submissions = sorted(specs, key=lambda s: (s.job.submitted_at, s.index))
    actions = sorted(enumerate(data.get("actions") or []), key=lambda a: (a[1]["at"], a[0]))
    until = data.get("until")
    events: list[dict[str, Any]] = []
    finishing: list[tuple[int, int, str, int]] = []  # (time, file index, job id, run token)
    tokens: dict[str, int] = {}
    submitted: set[str] = set()
    cancelled_early: dict[str, int] = {}

    def emit(decisions: Sequence[Decision]) -> None:
        for decision in decisions:
            event = decision.to_event()
            job_id = decision.job
            event["job"] = raw_ids[job_id]
            if decision.kind == ADMITTED:
                token = tokens[job_id] = tokens.get(job_id, 0) + 1
                finish = engine.finish_time(engine.job(job_id))  # None: stopped again now
                if finish is not None:
                    heapq.heappush(finishing, (finish, by_id[job_id].index, job_id, token))
            elif event.get("by") is not None:
                event["by"] = raw_ids[str(event["by"])]
            events.append(event)

    def next_finish() -> int | None:
        while finishing:
            at, _, job_id, token = finishing[0]
            if tokens.get(job_id) == token and engine.job(job_id).state is JobState.RUNNING:
                return at
            heapq.heappop(finishing)
        return None

    next_sub = 0
    next_act = 0
    now = 0
    while True:
        finish = next_finish()
        moment = _earliest(
            finish,
            submissions[next_sub].job.submitted_at if next_sub < len(submissions) else None,
            actions[next_act][1]["at"] if next_act < len(actions) else None,
            engine.next_deadline(),
        )
        if moment is None or (until is not None and moment > until):
            break
        now = moment
        done = []
        while finish == now:
            _, index, job_id, _ = heapq.heappop(finishing)
            done.append((index, job_id))
            finish = next_finish()
        for _, job_id in sorted(done):
            emit(engine.complete(job_id, now))
        emit(
            engine.advance_plans(now)
        )  # plan ends, then plan starts (docs/scheduling.md#capacity-plans)
        while next_act < len(actions) and actions[next_act][1]["at"] == now:
            action = actions[next_act][1]
            _apply_action(engine, action, now, by_id, submitted, cancelled_early, emit)
            next_act += 1
        next_sub = _submit_due(engine, submissions, next_sub, now, submitted, cancelled_early)
        emit(engine.schedule(now))
        emit(engine.timeouts(now))
    end = now if until is None else until  # reasons are judged at the run's end
    return _result(engine, specs, events, submitted, cancelled_early, raw_ids, explain, end)


def _earliest(*moments: int | None) -> int | None:
    """The earliest of the moments that are known (None: nothing left to happen)."""
    found = None
    for moment in moments:  # a loop, not min() over a list: asked at every instant
        if moment is not None and (found is None or moment < found):
            found = moment
    return found


def _submit_due(
    engine: Engine,
    submissions: Sequence[_Spec],
    next_sub: int,
    now: int,
    submitted: set[str],
    cancelled_early: Mapping[str, int],
) -> int:
    """Submit the jobs due at ``now`` from ``next_sub`` on (not those cancelled before
    their submission); the index of the next one."""
    while next_sub < len(submissions) and submissions[next_sub].job.submitted_at == now:
        spec = submissions[next_sub]
        next_sub += 1
        if spec.job.id in cancelled_early:
            continue
        engine.submit(spec.job)
        submitted.add(spec.job.id)
    return next_sub


def _apply_action(
    engine: Engine,
    action: Mapping[str, Any],
    now: int,
    by_id: Mapping[str, _Spec],
    submitted: set[str],
    cancelled_early: dict[str, int],
    emit: Any,
) -> None:
    kind = action["type"]
    if kind == "set_priority":
        job_id = str(action["job"])
        if job_id in submitted:
            engine.set_priority(job_id, action["priority"])
        else:
            by_id[job_id].job.priority = action["priority"]  # before its submission
    elif kind == "set_share":
        fields = {k: v for k, v in action.items() if k not in ("at", "type", "share")}
        engine.set_share(action["share"], **fields)
    elif kind == "set_capacity":
        emit(engine.set_capacity(action["instance_type"], action["capacity"], now))
    elif kind == "set_plan":
        emit(engine.set_plan(action["plan"], action["count"], now))
    elif kind == "cancel":
        job_id = str(action["job"])
        if job_id in submitted:
            emit(engine.cancel(job_id, now))
        elif job_id not in cancelled_early:
            cancelled_early[job_id] = now
            emit([Decision(DecisionKind.CANCELLED, job_id, now)])


def _result(
    engine: Engine,
    specs: list[_Spec],
    events: list[dict[str, Any]],
    submitted: set[str],
    cancelled_early: dict[str, int],
    raw_ids: Mapping[str, object],
    explain: bool,
    end: int,
) -> dict[str, Any]:
    jobs: dict[str, Any] = {}
    pending: dict[str, Any] = {}
    for spec in specs:
        job = spec.job
        key = str(spec.raw_id)
        if job.id in cancelled_early:
            jobs[key] = _job_row("CANCELLED", None, cancelled_early[job.id], None, 0, 0, None)
            continue
        if job.id not in submitted:
            jobs[key] = _job_row("PENDING", None, None, None, 0, 0, None)
            continue
        wait = None if job.started_at is None else job.started_at - job.submitted_at
        jobs[key] = _job_row(
            job.state.value,
            job.started_at,
            job.finished_at,
            wait,
            job.preemptions,
            plain(job.recomputed),
            job.preference,
        )
        if job.state is JobState.PENDING:
            reasons = engine.explain(job.id, end)
            if explain:
                pending[key] = [r.to_json() for r in reasons]
            else:
                pending[key] = [r.reason for r in reasons]
    return {"events": events, "jobs": jobs, "pending": pending}


def _job_row(
    state: str,
    started_at: int | None,
    finished_at: int | None,
    wait: int | None,
    preemptions: int,
    recomputed: int | float,
    preference: int | None,
) -> dict[str, Any]:
    return {
        "state": state,
        "started_at": started_at,
        "finished_at": finished_at,
        "wait": wait,
        "preemptions": preemptions,
        "recomputed": recomputed,
        "preference": preference,
    }


# ---------------------------------------------------------------------------- checking


def check(data: Mapping[str, Any], result: Mapping[str, Any]) -> list[str]:
    """Mismatches between a scenario's expectations and a result (empty: all match).

    ``expect`` is a subsequence: each expected event matches the next output event whose
    given keys all equal. ``expect_jobs`` compares the given keys. ``expect_pending`` is
    exact over all pending jobs and compares reason codes.
    """
    problems: list[str] = []
    events = result["events"]
    position = 0
    for i, expected in enumerate(data.get("expect") or []):
        found = None
        for k in range(position, len(events)):
            event = events[k]
            if all(key in event and event[key] == value for key, value in expected.items()):
                found = k
                break
        if found is None:
            problems.append(
                f"expect[{i}]: no event {json.dumps(expected)} after output event {position}"
            )
        else:
            position = found + 1
    for job_id, fields in (data.get("expect_jobs") or {}).items():
        row = result["jobs"].get(str(job_id))
        if row is None:
            problems.append(f"expect_jobs.{job_id}: no such job in the output")
            continue
        for key, value in fields.items():
            if row.get(key) != value:
                problems.append(
                    f"expect_jobs.{job_id}.{key}: expected {json.dumps(value)}, "
                    f"got {json.dumps(row.get(key))}"
                )
    if "expect_pending" in data:
        expected_pending = data["expect_pending"] or {}
        got = {
            job: [r["reason"] if isinstance(r, dict) else r for r in reasons]
            for job, reasons in result["pending"].items()
        }
        for job_id in sorted(set(expected_pending) | set(got)):
            want = expected_pending.get(job_id)
            have = got.get(job_id)
            if want != have:
                problems.append(
                    f"expect_pending.{job_id}: expected {json.dumps(want)}, got {json.dumps(have)}"
                )
    return problems


# ---------------------------------------------------------------------------- command line


def check_recorded(recorded: Mapping[str, Any], result: Mapping[str, Any]) -> list[str]:
    """Mismatches between a history file's ``recorded`` (``{"events", "jobs"}``) and the
    replay of its scenario (empty: the replay reproduces it): the first event that
    differs, and each job whose row differs."""
    problems: list[str] = []
    events, replayed = list(recorded.get("events") or []), result["events"]
    for i, (was, now) in enumerate(zip(events, replayed, strict=False)):
        if was != now:
            problems.append(f"events[{i}]: recorded {json.dumps(was)}, replayed {json.dumps(now)}")
            break
    else:
        if len(events) != len(replayed):
            problems.append(f"events: {len(events)} recorded, {len(replayed)} replayed")
    jobs = recorded.get("jobs") or {}
    for job_id, row in jobs.items():
        if result["jobs"].get(str(job_id)) != row:
            got = json.dumps(result["jobs"].get(str(job_id)))
            problems.append(f"jobs.{job_id}: recorded {json.dumps(row)}, replayed {got}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.simulate",
        description="Run the scheduling engine over a scenario file and print the result.",
    )
    parser.add_argument(
        "file",
        help="scenario JSON file (format: docs/scenarios.md), or a history file "
        "(manage.py export_history): its scenario is run",
    )
    parser.add_argument(
        "--explain", action="store_true", help="give each pending job's reasons with messages"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the result with the file's expect, expect_jobs and expect_pending "
        "(a history file's recorded events and jobs); exit 1 listing mismatches",
    )
    args = parser.parse_args(argv)
    try:
        with open(args.file, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        print(f"{args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"{args.file}: invalid JSON: {exc}", file=sys.stderr)
        return 2
    history = isinstance(data, dict) and "scenario" in data and "recorded" in data
    try:
        result = run(data["scenario"] if history else data, explain=args.explain)
    except ScenarioError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    if args.check:
        if history and isinstance(data["recorded"], dict):
            problems = check_recorded(data["recorded"], result)
        else:
            problems = check(data["scenario"] if history else data, result)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            return 1
        print("check: all expectations met", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
