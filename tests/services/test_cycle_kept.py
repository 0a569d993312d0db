"""The incremental cycle (``scheduler.cycle.kept``): a worker keeps the engine a queue's
last committed cycle left and reads only what changed. Its engine must always be the
engine a full read gives, and decide the same.

Committed data and ``transaction.on_commit`` are needed (an engine is kept only once its
cycle commits), so these tests use ``transactional_db``; scheduling triggers are off and
the tests run the cycles themselves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import re
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from governance.models import (
    CycleChange,
    CycleLog,
    Job,
    JobQueue,
    JobState,
    QueueCapacity,
    Share,
)
from governance.services import capacity as capacity_svc
from governance.services import hooks, runs
from governance.services import jobs as jobs_svc
from governance.services import plans as plans_svc
from governance.services import shares as shares_svc
from governance.services.errors import ServiceError
from scheduler import engine as eng
from scheduler.cycle import decide, kept, read
from scheduler.cycle.run import run_cycle
from scheduler.cycle.snapshot import QueueSnapshot
from scheduler.executors.registry import executor_for
from tests.factories import InstanceTypeFactory, TeamFactory, make_admin, make_lead, make_share

pytestmark = pytest.mark.django_db(transaction=True)

G5, P4 = "ml.g5.xlarge", "ml.p4d.24xlarge"


@pytest.fixture(autouse=True)
def _no_triggers(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[None]:
    monkeypatch.setattr(hooks.cycle_wanted, "receivers", [])
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.SCHEDULER_INCREMENTAL_CYCLE = True
    kept.forget_all()
    yield
    kept.forget_all()


# ----------------------------------------------------------------------------- the dump


def engine_dump(engine: eng.Engine, *, played: bool = True) -> dict[str, Any]:
    """Every job the engine holds pending or running, every field; pools with their
    accounting and running jobs; shares and plans. ``played`` False leaves out what the
    engine judges at its instant (before a cycle, a kept engine is still at the last
    one's; a fresh one has not passed its plans' starts yet): which preferences are
    blocked now and the next instant due."""
    skip = set() if played else {"blocked"}
    jobs = {
        job.id: {
            f.name: getattr(job, f.name) for f in dataclasses.fields(job) if f.name not in skip
        }
        for job in engine.jobs()
        if job.state in (eng.JobState.PENDING, eng.JobState.RUNNING)
    }
    st = engine._state
    pools = {
        key: {
            "capacity": pool.capacity,
            "usage": dict(pool.usage),
            "total": pool.total,
            "running": {s: sorted(jobs) for s, jobs in pool.running.items() if jobs},
            "borrowers": sorted(pool.borrowers),
            "reserve_idle": pool.reserve_idle,
            "prios": {
                s: sorted(zip(p, pool.counts[s], strict=True)) for s, p in pool.prios.items() if p
            },
            "sizes": {s: dict(sizes) for s, sizes in pool.sizes.items() if sizes},
        }
        for key, pool in [*st.pools.items(), *st.plans.items()]
    }
    return {
        "jobs": jobs,
        "pending": sorted(st.pending),
        "pools": pools,
        "shares": engine.shares,
        "plans": engine.plans,
        "types": engine.instance_types,
        "next_deadline": engine.next_deadline() if played else None,
    }


def assert_same(kept_dump: dict[str, Any], full_dump: dict[str, Any], where: str) -> None:
    for part in kept_dump:
        if part == "jobs":
            assert kept_dump["jobs"].keys() == full_dump["jobs"].keys(), where
            for key, fields in kept_dump["jobs"].items():
                assert fields == full_dump["jobs"][key], (where, key)
        elif part == "pools":
            assert kept_dump["pools"].keys() == full_dump["pools"].keys(), where
            for key, fields in kept_dump["pools"].items():
                for name, value in fields.items():
                    assert value == full_dump["pools"][key][name], (where, key, name)
        else:
            assert kept_dump[part] == full_dump[part], (where, part)


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every cycle's decide phase checked against a full read of the same instant, in
    the cycle's transaction: the engines before (but for what depends on their
    instant), the decisions, and the engines after. Returns the cycles checked."""
    real = decide.decide
    seen: list[str] = []

    def checking(snapshot: QueueSnapshot) -> list[eng.Decision]:
        queue = snapshot.queue
        full = read.load(queue, snapshot.now, lock=False, executor=executor_for(queue))
        where = f"cycle {len(seen)}"
        assert_same(
            engine_dump(snapshot.engine, played=False),
            engine_dump(full.engine, played=False),
            where + " before",
        )
        assert snapshot.jobs.rows.keys() == full.jobs.rows.keys(), where
        got = real(snapshot)
        want = real(full)
        assert got == want, where
        assert_same(engine_dump(snapshot.engine), engine_dump(full.engine), where + " after")
        seen.append(where)
        return got

    monkeypatch.setattr(decide, "decide", checking)
    return seen


# ----------------------------------------------------------------------------- the world


class World:
    def __init__(self, executor: str = "agent") -> None:
        self.queue = JobQueue.objects.create(name="inc", executor=executor)
        self.types = {
            G5: InstanceTypeFactory(name=G5),
            P4: InstanceTypeFactory(name=P4, hourly_price=12),
        }
        for name, count in {G5: 6, P4: 3}.items():
            QueueCapacity.objects.create(
                queue=self.queue, instance_type=self.types[name], count=count
            )
        self.admin = make_admin("root")
        teams = [TeamFactory(name=f"t{i}") for i in range(3)]
        self.leads = [make_lead(team, f"lead{i}") for i, team in enumerate(teams)]
        self.shares = [
            make_share(
                self.queue,
                teams[0],
                "borrower",
                {G5: 2, P4: 1},
                policy="LEND_AND_BORROW",
                borrow_limit=-1,
                in_share_preemption=True,
            ),
            make_share(
                self.queue, teams[1], "lender", {G5: 3}, policy="LEND", in_share_preemption=True
            ),
            make_share(self.queue, teams[2], "keeper", {G5: 1, P4: 2}, policy="RESERVE"),
        ]
        self.plan_n = 0

    def lead_of(self, share_id: int) -> Any:
        return self.leads[[s.pk for s in self.shares].index(share_id)]

    def active(self, state: str | None = None) -> list[Job]:
        states = (state,) if state else (JobState.PENDING, JobState.RUNNING)
        return list(Job.objects.filter(queue=self.queue, state__in=states).order_by("id"))


def submit(world: World, rng: random.Random) -> None:
    i = rng.randrange(3)
    types = [G5, P4] if i != 1 else [G5]
    prefs = [
        {"instance_type": t, "count": rng.randint(1, 2)}
        for t in rng.sample(types, rng.randint(1, len(types)))
    ]
    extra: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.15:
        extra["max_pending"] = rng.randint(1, 4)
    elif roll < 0.3:
        extra["deadline"] = timezone.now() + timedelta(seconds=rng.randint(30, 4000))
        extra["duration"] = rng.randint(60, 3000)
    elif roll < 0.4:
        extra["max_cost"] = rng.randint(1, 40)
        extra["duration"] = rng.randint(60, 3000)
    jobs_svc.job_submit(
        actor=world.leads[i],
        share=world.shares[i].pk,
        name="j",
        preferences=prefs,
        priority=rng.randint(0, 9),
        may_borrow=rng.random() < 0.8,
        preemptible=rng.random() < 0.8,
        **extra,
    )


def cancel_or_reprioritise(world: World, rng: random.Random) -> None:
    active = world.active()
    if not active:
        return
    job = rng.choice(active)
    lead = world.lead_of(job.share_id)
    if rng.random() < 0.4:
        jobs_svc.job_cancel(actor=lead, job=job.pk)
    else:
        jobs_svc.job_reprioritise(actor=lead, job=job.pk, priority=rng.randint(0, 9))


def report(world: World, rng: random.Random) -> None:
    running = world.active(JobState.RUNNING)
    if not running:
        return
    job = rng.choice(running)
    now = timezone.now()
    roll = rng.random()
    if roll < 0.3:
        runs.run_complete(actor=None, job_id=job.pk, run=job.run, now=now)
    elif roll < 0.4:
        runs.run_fail(actor=None, job_id=job.pk, run=job.run, now=now, message="boom")
    else:
        kind = rng.choice(["started", "heartbeat", "checkpoint"])
        work = round(rng.uniform(0, 500), 3) if kind != "heartbeat" else None
        if kind == "checkpoint" and work is None:
            work = 1.0
        runs.run_report(actor=None, job_id=job.pk, run=job.run, kind=kind, now=now, work=work)


def edit_setting(world: World, rng: random.Random) -> None:
    roll = rng.random()
    if roll < 0.4:
        share = Share.objects.get(pk=rng.choice(world.shares).pk)
        limits = {G5: rng.randint(0, 4)} | (
            {P4: rng.randint(0, 2)} if share.name != "lender" else {}
        )
        shares_svc.share_update(
            actor=world.admin,
            share=share.pk,
            version=share.version,
            changes={"limits": limits},
            reason="random",
        )
    elif roll < 0.7:
        capacity_svc.queue_set_capacity(
            actor=world.admin,
            queue=world.queue.pk,
            capacity={G5: rng.randint(3, 8), P4: rng.randint(1, 4)},
            reason="random",
        )
    else:
        world.plan_n += 1
        now = timezone.now()
        plans_svc.plan_create(
            actor=world.admin,
            queue=world.queue.pk,
            share=world.shares[0].pk,
            name=f"plan{world.plan_n}",
            instance_type=G5,
            count=rng.randint(1, 2),
            start=now + timedelta(seconds=rng.randint(-60, 2)),
            end=now + timedelta(hours=1),
            reason="random",
        )


def elsewhere(change: Callable[[], None]) -> None:
    """A change committed by another connection (a web request beside the worker)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            change()
        except ServiceError:
            pass
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert not errors, errors


# ----------------------------------------------------------------------------- the tests


@contextlib.contextmanager
def worker(store: dict[int, kept.Kept]) -> Iterator[None]:
    """Run the cycles inside as another worker process would: with its own kept engines."""
    mine = kept._KEPT
    kept._KEPT = store
    try:
        yield
    finally:
        kept._KEPT = mine


@pytest.mark.parametrize(("executor", "workers"), [("agent", 1), ("agent", 3), ("simulated", 2)])
def test_a_kept_engine_always_equals_a_full_read_after_random_changes(
    checked: list[str], settings: Any, executor: str, workers: int
) -> None:
    """Random changes through the services and another connection, between cycles that
    ``workers`` worker processes take in turn at random; on the simulated fleet (which
    runs the jobs itself, an hour of work a minute) the runs also finish by the clock."""
    settings.DEMO_TIME_FACTOR = 3600.0
    world = World(executor)
    rng = random.Random(34)
    stores: list[dict[int, kept.Kept]] = [{} for _ in range(workers)]
    pick = random.Random(7)  # which worker takes each cycle
    reads: list[str] = []
    finished = 0  # runs the simulated fleet finished by the clock, on a kept engine
    for round_ in range(60):
        for _ in range(rng.randint(0, 4)):
            submit(world, rng)
        for step in (cancel_or_reprioritise, report):
            for _ in range(rng.randint(0, 2)):
                with contextlib.suppress(ServiceError):
                    step(world, rng)
        if rng.random() < 0.3:
            elsewhere(lambda seed=round_: report(world, random.Random(seed)))
        if rng.random() < 0.1:
            with contextlib.suppress(ServiceError):
                edit_setting(world, rng)
        with worker(pick.choice(stores)):
            result = run_cycle(world.queue.pk)
        reads.append(result.read)
        finished += result.completed if result.read == "kept" else 0
    assert len(checked) == 60
    # Most cycles read only what changed: the test proves the kept path, not the fallback.
    # (each worker finds a change of the setting for itself: more full reads with more)
    assert reads.count("kept") >= 35 - 2 * workers, reads
    assert any(r.startswith("full: the setting changed") for r in reads), reads
    assert Job.objects.filter(queue=world.queue, state=JobState.RUNNING).exists()
    assert (finished > 0) == (executor == "simulated")


def test_a_cycle_that_changes_nothing_reads_no_job() -> None:
    world = World()
    rng = random.Random(1)
    for _ in range(12):
        submit(world, rng)
    assert run_cycle(world.queue.pk).read == "full: nothing kept"
    # Each cycle re-reads the jobs the one before decided about; until one decides nothing.
    for _ in range(5):
        result = run_cycle(world.queue.pk)
        if not (result.admitted or result.preempted or result.timed_out):
            break
    assert not CycleChange.objects.filter(queue_id=world.queue.pk).exists()
    with CaptureJobReads() as reads:
        assert run_cycle(world.queue.pk).read == "kept"
    assert reads.count == 0


class CaptureJobReads:
    """Counts the statements that read the job table (the cycle's own reads)."""

    def __enter__(self) -> CaptureJobReads:
        self.count = 0

        def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            if re.search(rf'FROM "?{Job._meta.db_table}"?(\s|$)', sql):
                self.count += 1
            return execute(sql, params, many, context)

        self._hook = connection.execute_wrapper(wrapper)
        self._hook.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hook.__exit__(*exc)


def test_a_rolled_back_cycle_keeps_nothing() -> None:
    world = World()
    submit(world, random.Random(2))
    run_cycle(world.queue.pk)
    assert run_cycle(world.queue.pk).read == "kept"
    with pytest.raises(RuntimeError), transaction.atomic():
        assert run_cycle(world.queue.pk).read == "kept"
        raise RuntimeError("the caller's transaction fails after the cycle")
    assert run_cycle(world.queue.pk).read == "full: nothing kept"
    assert run_cycle(world.queue.pk).read == "kept"


def test_a_worker_behind_other_workers_cycles_catches_up_on_their_changes(
    checked: list[str],
) -> None:
    world = World()
    rng = random.Random(3)
    for _ in range(4):
        submit(world, rng)
    run_cycle(world.queue.pk)
    other: dict[int, kept.Kept] = {}
    with worker(other):  # another worker runs the queue three times, consuming the log
        for _ in range(3):
            submit(world, rng)
            report(world, rng)
            run_cycle(world.queue.pk)
    submit(world, rng)
    result = run_cycle(world.queue.pk)
    assert (result.read, result.caught_up) == ("kept", 3)
    with worker(other):  # and the other worker is one behind now
        result = run_cycle(world.queue.pk)
    assert (result.read, result.caught_up) == ("kept", 1)
    assert len(checked) == 6


def test_a_kept_cycle_gone_from_the_log_reads_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept, "KEPT_CYCLES", 3)
    world = World()
    submit(world, random.Random(4))
    run_cycle(world.queue.pk)
    with worker({}):
        for _ in range(3):
            run_cycle(world.queue.pk)
    assert CycleLog.objects.filter(queue_id=world.queue.pk).count() == 3
    assert run_cycle(world.queue.pk).read == "full: the kept cycle is no longer in the log"
    assert run_cycle(world.queue.pk).read == "kept"


def test_another_history_under_the_kept_number_reads_in_full() -> None:
    """A kept engine whose cycle number now names another cycle (the log was rebuilt,
    a database restored) is not built on."""
    world = World()
    submit(world, random.Random(6))
    run_cycle(world.queue.pk)
    CycleLog.objects.filter(queue_id=world.queue.pk).update(token=1)
    assert run_cycle(world.queue.pk).read == "full: the kept cycle is no longer in the log"


def test_a_kept_job_changed_under_the_cycle_makes_it_read_again_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = World()
    # one for the holder, one the RESERVE share "keeper" keeps idle
    QueueCapacity.objects.filter(queue=world.queue, instance_type=world.types[G5]).update(count=2)
    QueueCapacity.objects.filter(queue=world.queue, instance_type=world.types[P4]).update(count=0)
    lead = world.leads[0]
    g5 = [{"instance_type": G5, "count": 1}]
    holder = jobs_svc.job_submit(actor=lead, share=world.shares[0].pk, name="h", preferences=g5)
    assert run_cycle(world.queue.pk).admitted == 1
    job = jobs_svc.job_submit(actor=lead, share=world.shares[0].pk, name="j", preferences=g5)
    assert run_cycle(world.queue.pk).read == "kept"
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    holder.refresh_from_db()

    real_advance = kept.advance

    def advance_then_change(queue_id: int, found: kept.Kept | None) -> kept.Advance:
        # The holder's run ends before the cycle takes the log (it is read again) ...
        elsewhere(
            lambda: runs.run_complete(actor=None, job_id=holder.pk, run=1, now=timezone.now())
        )
        log = real_advance(queue_id, found)
        # ... the waiting job's priority changes after: its kept row is stale.
        elsewhere(lambda: jobs_svc.job_reprioritise(actor=lead, job=job.pk, priority=7))
        return log

    monkeypatch.setattr(kept, "advance", advance_then_change)
    result = run_cycle(world.queue.pk)
    assert result.read == "full: stale read"
    assert result.admitted == 1
    job.refresh_from_db()
    assert (job.state, job.priority) == (JobState.RUNNING, 7)


def test_switched_off_every_cycle_reads_in_full(settings: Any, checked: list[str]) -> None:
    settings.SCHEDULER_INCREMENTAL_CYCLE = False
    world = World()
    submit(world, random.Random(5))
    run_cycle(world.queue.pk)
    assert run_cycle(world.queue.pk).read.startswith("full: switched off")


def test_the_change_log_trigger_watches_every_column_the_cycle_reads() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = 'governance_job_changed'")
        (source,) = cursor.fetchone()
    missing = [name for name in read.JOB_FIELDS if f"OLD.{name}" not in source and name != "id"]
    assert not missing
    world = World()
    job = jobs_svc.job_submit(
        actor=world.leads[0],
        share=world.shares[0].pk,
        name="j",
        preferences=[{"instance_type": G5, "count": 1}],
    )
    CycleChange.objects.all().delete()
    Job.objects.filter(pk=job.pk).update(last_heartbeat_at=timezone.now())  # not read
    assert not CycleChange.objects.exists()
    Job.objects.filter(pk=job.pk).update(priority=3)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    Job.objects.filter(pk=job.pk).update(priority=4)  # finished before and after: not logged
    assert list(CycleChange.objects.values_list("queue_id", "job_id")) == [
        (world.queue.pk, job.pk),
        (world.queue.pk, job.pk),
    ]


def test_edits_outside_the_services_reach_the_next_cycle(checked: list[str]) -> None:
    """A type's speed, a workload's verification and a job row changed by plain
    updates (an admin's shell, a migration) are seen as a full read would see them."""
    from governance.models import InstanceType, RecoveryStatus, Workload

    world = World()
    Share.objects.filter(pk=world.shares[0].pk).update(borrow_requires_verified_recovery=True)
    workload = Workload.objects.create(team=world.shares[0].team, name="w")
    job = jobs_svc.job_submit(
        actor=world.leads[0],
        share=world.shares[0].pk,
        name="j",
        preferences=[{"instance_type": P4, "count": 3}],
        workload=workload.pk,
    )
    run_cycle(world.queue.pk)
    assert run_cycle(world.queue.pk).read == "kept"
    InstanceType.objects.filter(name=G5).update(speed=2.0)
    assert run_cycle(world.queue.pk).read == "full: the setting changed"
    assert run_cycle(world.queue.pk).read == "kept"
    Workload.objects.filter(pk=workload.pk).update(recovery_status=RecoveryStatus.VERIFIED)
    assert run_cycle(world.queue.pk).read == "full: the setting changed"
    Job.objects.filter(pk=job.pk).update(priority=5, may_borrow=False)
    assert run_cycle(world.queue.pk).read == "kept"
    assert len(checked) == 6


def test_a_cycle_leaving_the_same_usage_records_it_once_a_minute() -> None:
    """The usage history loses nothing when cycles that leave the same levels within one
    minute skip their write: the first cycle of the next minute credits the whole time."""
    from governance.models import UsageLevel, UsageRollup

    world = World()
    rng = random.Random(8)
    for _ in range(6):
        submit(world, rng)
    minute = timezone.now().replace(second=0, microsecond=0) + timedelta(minutes=2)
    for _ in range(4):  # until nothing is left to decide
        result = run_cycle(world.queue.pk, now=minute)
    assert (result.read, result.admitted, result.preempted) == ("kept", 0, 0)
    levels = result.levels
    assert any(lv.own for lv in levels)
    UsageRollup.objects.filter(queue=world.queue).delete()
    for second in (10, 30, 59):
        result = run_cycle(world.queue.pk, now=minute + timedelta(seconds=second))
        assert result.levels == levels
        assert UsageLevel.objects.get(queue_id=world.queue.pk).since == minute  # not written
    run_cycle(world.queue.pk, now=minute + timedelta(seconds=61))
    assert UsageLevel.objects.get(queue_id=world.queue.pk).since == minute + timedelta(seconds=61)
    credited = UsageRollup.objects.filter(
        queue=world.queue, width=UsageRollup.MINUTE, start=minute
    ).values_list("share_id", "instance_type_id", "own", "idle")
    # the whole minute, at the levels the skipped cycles left
    assert sorted(credited) == sorted(
        (lv.share_id, lv.instance_type_id, lv.own * 60.0, lv.idle * 60.0)
        for lv in levels
        if lv.own or lv.borrowed or lv.lent or lv.idle
    )


def test_a_run_the_fleet_finished_but_cancelled_meanwhile_is_not_completed(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """On the simulated fleet a kept running job is restored from its kept row, but one
    the fleet finished by now is read and locked first: a cancel committed after the
    cycle took the log is seen, as a full read would see it, not completed over."""
    settings.DEMO_TIME_FACTOR = 3600.0
    world = World("simulated")
    lead = world.leads[0]
    job = jobs_svc.job_submit(
        actor=lead,
        share=world.shares[0].pk,
        name="j",
        preferences=[{"instance_type": G5, "count": 1}],
        duration=600,
    )
    assert run_cycle(world.queue.pk).admitted == 1
    assert run_cycle(world.queue.pk).read == "kept"
    real_advance = kept.advance

    def advance_then_cancel(queue_id: int, found: kept.Kept | None) -> kept.Advance:
        log = real_advance(queue_id, found)
        elsewhere(lambda: jobs_svc.job_cancel(actor=lead, job=job.pk))
        return log

    monkeypatch.setattr(kept, "advance", advance_then_cancel)
    # 600 s of work at 3,600 simulated seconds a second: done well within 5 s
    result = run_cycle(world.queue.pk, now=timezone.now() + timedelta(seconds=5))
    assert (result.read, result.completed) == ("kept", 0)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_an_unchanged_run_on_the_simulated_fleet_costs_a_kept_cycle_no_model(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The fleet moves a running job's progress with the clock, not its row: a kept cycle
    gives the engine the work done by now without building the job's model again (when
    the run ends is worked out once per row), however many cycles the run lasts."""
    settings.DEMO_TIME_FACTOR = 1.0
    world = World("simulated")
    for share in world.shares:
        jobs_svc.job_submit(
            actor=world.lead_of(share.pk),
            share=share.pk,
            name="long",
            preferences=[{"instance_type": G5, "count": 1}],
            duration=3600,
        )
    start = timezone.now()
    assert run_cycle(world.queue.pk, now=start).admitted == 3
    assert run_cycle(world.queue.pk, now=start + timedelta(seconds=1)).read == "kept"
    built: list[int] = []
    real_row_job = kept.row_job

    def counted(row: dict[str, Any]) -> Any:
        built.append(row["id"])
        return real_row_job(row)

    monkeypatch.setattr(kept, "row_job", counted)
    for second in (60, 120):
        result = run_cycle(world.queue.pk, now=start + timedelta(seconds=second))
        assert (result.read, result.completed) == ("kept", 0)
        engine = kept._KEPT[world.queue.pk].snapshot.engine
        # each at the work a full read would give it: a minute's or two's, from the clock
        assert sorted(j.work_done for j in engine.running_jobs()) == [second * 1000] * 3
    assert built == []
