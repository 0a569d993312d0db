"""When pending jobs would start: the engine played forward on a copy of the state.

Plain Python, no Django. A forecast takes an engine holding the live state *after* the
current instant has been scheduled (the caller plays it, so jobs about to start are
already running), each running job's expected finish where its remaining work is known,
and plays the same rules forward: at each instant where something would finish (or a
max-pending deadline falls) the finished runs complete, then the cycles run, then the
timeouts, exactly as the scheduler would. The first instant at which a pending job is
admitted is its estimated start.

What it assumes, and so what the estimate's basis says: nobody submits, cancels or
reprioritises anything, capacity and shares stay as they are, and every run takes its
declared remaining work at its type's speed. A running job whose remaining work is not
known (no declared duration) is taken never to finish, so jobs that can only start after
it get no estimate rather than a wrong one.

The cost is one engine cycle per distinct finishing instant, bounded by ``max_steps``
and ``horizon``: beyond them a job gets no estimate, and the basis says playback stopped.

**On the entitlement alone** (``play_entitled``): the same playback in a world where
nobody lends. Every ``LEND_AND_BORROW`` share is played as ``LEND`` from ``now`` on, so no
job borrows (neither capacity no share owns nor another share's idle entitlement): a
pending job and its share-mates start only within their share's own limits, taking back
by reclaim what borrowers hold there, exactly as the rules let an owner. Runs going now
keep running (a policy change never stops a job) until they finish or are reclaimed.
One playback gives every pending job's start on its own entitlement. A job none of whose
preferences could ever fit its share's limit (or the queue's capacity) is "never on its
own entitlement" (``never_on_entitlement``), whatever the playback finds.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from scheduler.engine.facade import Engine
from scheduler.engine.model import Decision, DecisionKind, Job, JobState, Policy
from scheduler.engine.work import ceil

# The live forecast's bounds (scheduler.readings): a week of clock time ahead, 5,000
# distinct instants played, finishes rounded up to about 1% of the time ahead (at least
# a second): a busy queue's thousands of finishing instants become a few hundred.
FORECAST_HORIZON_SECONDS = 7 * 24 * 3600
FORECAST_MAX_STEPS = 5000
FORECAST_RELATIVE = 100
FORECAST_MIN_STEP_MS = 1000
# A page pays for a forecast once per stored state of the queue: at most this long (the
# basis then says playback stopped at its time budget).
FORECAST_BUDGET_SECONDS = 0.5


def cycle_order_key(job: Job) -> tuple[int, int, str]:
    """The order the cycle takes pending jobs in once tentative placements are equal:
    priority descending, then submission ascending, then job id (docs/scheduling.md)."""
    return (-job.priority, job.submitted_at, job.id)


@dataclass
class Forecast:
    """Estimated starts of pending jobs, and what the estimate rests on."""

    now: int
    starts: dict[str, int] = field(default_factory=dict)
    """Pending job id -> estimated first admission (same time unit as ``now``)."""
    position: dict[str, int] = field(default_factory=dict)
    """Pending job id -> 1-based position in the cycle's order (``cycle_order_key``)."""
    timed_out: set[str] = field(default_factory=set)
    """Pending jobs the playback times out before they start."""
    running: int = 0
    running_known: int = 0
    """Running jobs at ``now``, and how many of them have a known remaining work."""
    stopped_at: int | None = None
    """When playback stopped at a bound (``horizon`` or ``max_steps``); None: it ran
    until nothing more could happen."""

    out_of_time: bool = False
    """Playback stopped because its time budget was spent (``stopped_at`` is set)."""
    rounded: bool = False
    """Finishing instants were rounded up (``relative``): estimates err late by up to
    about 1/relative of the time ahead."""
    entitled: bool = False
    """Played on the entitlements alone (``play_entitled``): nobody lent."""
    never: set[str] = field(default_factory=set)
    """Pending jobs that can never start on their share's entitlement alone (only set
    by ``play_entitled``)."""

    def basis(self) -> str:
        """How the estimates were made, in words a team lead can weigh."""
        text = (
            f"engine playback, remaining work known for {self.running_known} of "
            f"{self.running} running jobs"
        )
        if self.running_known < self.running:
            text += " (the others are taken never to finish)"
        if self.entitled:
            text += "; nobody lends (each share on its own limits)"
        text += "; assumes no new submissions or changes"
        if self.rounded:
            text += "; to within about 1% of the time ahead"
        if self.out_of_time:
            text += "; playback stopped at its time budget (later starts not estimated)"
        elif self.stopped_at is not None:
            text += "; playback stopped at its horizon"
        return text


def _finish(job: Job, speed: Fraction | int | float, at: int, time_factor: float) -> int | None:
    """When a run admitted at ``at`` completes, in clock time (None: unknown work)."""
    if job.duration is None:
        return None
    remaining = max(0, job.duration - job.work_done)
    needed = Fraction(remaining) / Fraction(speed) if speed != 1 else Fraction(remaining)
    seconds = (Fraction(job.run_overhead) + needed) / Fraction(time_factor)
    return at + ceil(seconds)


def coarsen(at: int, now: int, min_step: int, relative: int) -> int:
    """``at`` rounded up to a whole multiple of a step of about 1/``relative`` of its
    distance from ``now`` (``min_step`` times a power of two, constant over each band
    ``(min_step * relative * 2^(k-1), min_step * relative * 2^k]`` of distances).
    Never earlier, and never out of order: each step's multiples are among the smaller
    steps' multiples, so a later instant never rounds to an earlier one."""
    ahead = at - now
    if ahead <= 0:
        return at
    bands = -(-ahead // (min_step * relative))  # smallest k with 2^k >= this
    step = min_step << (bands - 1).bit_length()
    return -(-at // step) * step


def play_forward(
    engine: Engine,
    now: int,
    finish_at: Mapping[str, int | None],
    *,
    time_factor: float = 1.0,
    horizon: int | None = None,
    max_steps: int = 5000,
    admitted_now: Collection[str] = (),
    relative: int | None = None,
    min_step: int = 1,
    budget: float | None = None,
) -> Forecast:
    """Play ``engine`` (a copy: it is changed) forward from ``now``.

    ``finish_at`` gives, per running job, when it finishes in clock time (None or absent:
    unknown). ``time_factor`` is how much faster than the clock runs do their work (the
    simulated fleet's factor; 1 for real executors). ``horizon`` bounds the playback
    (clock time after ``now``); ``max_steps`` the number of instants played.
    ``admitted_now`` names jobs that were pending until the caller played the current
    instant, which started them: they start at ``now`` and keep their position.
    ``relative`` (None: exact) rounds every finishing instant up with ``coarsen``, so
    finishes close together are played as one instant. ``budget`` (seconds of this
    process's time; None: no limit) stops the playback when spent, like the bounds.
    """
    started = time.perf_counter()
    playback = _Playback(engine, now, time_factor, relative, min_step)
    playback.start(admitted_now, finish_at)
    steps = 0
    while playback.waiting:
        at = playback.next_moment()
        if at is None:
            break  # nothing will ever change: the rest never start in this playback
        beyond = (horizon is not None and at > now + horizon) or steps >= max_steps
        over_time = not beyond and budget is not None and time.perf_counter() - started > budget
        if beyond or over_time:
            playback.out.stopped_at = at
            playback.out.out_of_time = over_time
            break
        steps += 1
        playback.finish_due(at)
        playback.play(at)
    return playback.out


class _Playback:
    """One forecast's playback: the engine it changes, the pending jobs still waiting
    for their first start, and the known finishes ahead as a heap of ``(finish, job id,
    run start)``. A run preempted in the playback leaves a stale entry, recognised
    because the job no longer runs the run that started then."""

    def __init__(
        self, engine: Engine, now: int, time_factor: float, relative: int | None, min_step: int
    ) -> None:
        self.engine = engine
        self.now = now
        self.time_factor = time_factor
        self.relative = relative
        self.min_step = min_step
        self.speeds = {name: spec.speed for name, spec in engine.instance_types.items()}
        self.heap: list[tuple[int, str, int | None]] = []
        self.waiting: set[str] = set()
        self.out = Forecast(now=now, rounded=relative is not None)

    def when(self, done: int) -> int:
        """A finishing instant as the playback plays it (rounded up with ``relative``)."""
        if self.relative is None:
            return done
        return coarsen(done, self.now, self.min_step, self.relative)

    def start(self, admitted_now: Collection[str], finish_at: Mapping[str, int | None]) -> None:
        """The pending jobs' positions in the cycle's order (the jobs started now keep
        theirs, and start at ``now``), and the known finishes of the runs going now."""
        engine, now, out = self.engine, self.now, self.out
        fresh = set(admitted_now)
        pending = sorted(
            [*engine.pending_jobs(), *(engine.job(key) for key in sorted(fresh))],
            key=cycle_order_key,
        )
        out.position = {job.id: i + 1 for i, job in enumerate(pending)}
        out.starts = dict.fromkeys(sorted(fresh), now)
        self.waiting = {job.id for job in pending} - fresh
        for job in engine.jobs():
            if job.id in fresh:
                self._push_run(job, now)
            elif job.state is JobState.RUNNING:
                out.running += 1
                done = finish_at.get(job.id)
                if done is not None:
                    out.running_known += 1
                    self.heap.append((self.when(max(done, now)), job.id, job.run_started_at))
        heapq.heapify(self.heap)

    def _push_run(self, job: Job, at: int) -> None:
        """The finish of ``job``'s run admitted at ``at``, when its work is known."""
        assert job.instance_type is not None
        done = _finish(job, self.speeds[job.instance_type], at, self.time_factor)
        if done is not None:
            heapq.heappush(self.heap, (self.when(done), job.id, job.run_started_at))

    def next_moment(self) -> int | None:
        """The next instant anything changes: a known finish or a max-pending deadline
        (None: nothing ever will)."""
        moments = [self.heap[0][0]] if self.heap else []
        deadline = self.engine.next_deadline()
        if deadline is not None:
            moments.append(max(deadline, self.now))
        return min(moments) if moments else None

    def finish_due(self, at: int) -> None:
        """Complete the runs that finish by ``at`` (stale entries skipped)."""
        heap, engine = self.heap, self.engine
        while heap and heap[0][0] <= at:
            _, job_id, run_start = heapq.heappop(heap)
            job = engine.job(job_id)
            if job.state is JobState.RUNNING and job.run_started_at == run_start:
                engine.complete(job_id, at)

    def play(self, at: int) -> None:
        """The cycle and the timeouts at ``at``, as the scheduler plays them: a waiting
        job admitted has its estimated start, a waiting job timed out none."""
        waiting, out, engine = self.waiting, self.out, self.engine
        for d in engine.schedule(at) + engine.timeouts(at):
            if d.kind == DecisionKind.ADMITTED:
                if d.job in waiting:
                    waiting.discard(d.job)
                    out.starts[d.job] = at
                self._push_run(engine.job(d.job), at)
            elif d.kind == DecisionKind.TIMED_OUT and d.job in waiting:
                waiting.discard(d.job)
                out.timed_out.add(d.job)


def lend_nothing(engine: Engine) -> None:
    """Make ``engine`` (a copy: it is changed) a world where nobody lends: every share
    that may borrow is played as ``LEND``, which is the same share apart from borrowing."""
    for name, config in sorted(engine.shares.items()):
        if config.policy is Policy.LEND_AND_BORROW:
            engine.set_share(name, policy=Policy.LEND)


def never_on_entitlement(engine: Engine, jobs: Sequence[Job]) -> set[str]:
    """The ``jobs`` none of whose preferences fits its share's own limit on the type
    (and the queue's capacity), so they can never start unless someone lends. A plan
    preference is the share's own capacity: a job with one is never in this set."""
    shares = engine.shares
    types = engine.instance_types
    out = set()
    for job in jobs:
        limits = shares[job.share].limits
        if all(
            pref.plan is None
            and pref.count
            > min(
                limits.get(pref.instance_type, 0),
                types[pref.instance_type].capacity if pref.instance_type in types else 0,
            )
            for pref in job.preferences
        ):
            out.add(job.id)
    return out


def play_entitled(
    engine: Engine,
    now: int,
    finish_at: Mapping[str, int | None],
    *,
    play_now: Callable[[Engine], Sequence[Decision]] | None = None,
    time_factor: float = 1.0,
    horizon: int | None = None,
    max_steps: int = 5000,
    relative: int | None = None,
    min_step: int = 1,
    budget: float | None = None,
) -> Forecast:
    """Every pending job's estimated start on its share's entitlement alone (see the
    module's docstring), with ``play_forward``'s arguments.

    ``engine`` (a copy: it is changed) holds the state before the cycles of ``now``
    (or one where they started nothing): it is made to lend nothing, the instant is
    played (``play_now``, by default the engine's cycles at ``now``; a job it starts
    starts now), then the playback goes on as ``play_forward``'s, within what is left of
    ``budget``. Pending jobs that can never start without someone lending are in
    ``never``.
    """
    began = time.perf_counter()
    waiting_before = engine.pending_jobs()
    lend_nothing(engine)
    never = never_on_entitlement(engine, waiting_before)
    decisions = play_now(engine) if play_now is not None else engine.schedule(now)
    waiting_ids = {job.id for job in waiting_before}
    started = [d.job for d in decisions if d.kind == DecisionKind.ADMITTED and d.job in waiting_ids]
    if budget is not None:  # what comes before the playback is paid from the same budget
        budget = max(0.0, budget - (time.perf_counter() - began))
    out = play_forward(
        engine,
        now,
        finish_at,
        time_factor=time_factor,
        horizon=horizon,
        max_steps=max_steps,
        admitted_now=started,
        relative=relative,
        min_step=min_step,
        budget=budget,
    )
    out.entitled = True
    out.never = never  # none of them can start: no preference fits within its limits
    return out
