"""Cycles of one queue racing each other, and a worker dying halfway through a cycle.

These tests need committed data seen by several connections (threads, a subprocess), so
they use ``transactional_db``. Scheduling triggers are switched off: nothing here needs a
Celery worker, and the cycles are driven by the test itself.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from governance.models import AuditEntry, AuditEvent, Job, JobState, QueueCapacity, Share
from governance.services import hooks
from governance.services import jobs as jobs_svc
from governance.services import shares as shares_svc
from governance.services.errors import ServiceError
from scheduler.cycle.run import run_cycle
from tests.conftest import database_url
from tests.factories import TeamFactory, make_admin, make_lead, make_queue, make_share

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent.parent
G5, P4 = "ml.g5.xlarge", "ml.p4d.24xlarge"
CAPACITY = {G5: 4, P4: 2}
ROUNDS = 200
CYCLERS = 3


@pytest.fixture(autouse=True)
def _no_triggers(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    # No cycle requests reach a worker (a test worker may be up): this test runs them.
    monkeypatch.setattr(hooks.cycle_wanted, "receivers", [])
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def running_usage(queue_id: int) -> Counter[str]:
    used: Counter[str] = Counter()
    rows = Job.objects.filter(queue_id=queue_id, state=JobState.RUNNING).values_list(
        "instance_type__name", "preferences", "preference"
    )
    for type_name, preferences, index in rows:
        used[type_name] += int(preferences[index or 0]["count"])
    return used


def capacity_of(queue_id: int) -> dict[str, int]:
    return dict(
        QueueCapacity.objects.filter(queue_id=queue_id).values_list("instance_type__name", "count")
    )


def assert_each_decision_applied_once(queue_id: int) -> int:
    admitted = Counter(
        (entry["job_id"], entry["after"]["run"])
        for entry in AuditEntry.objects.filter(
            event_type=AuditEvent.JOB_ADMITTED, queue_id=queue_id
        ).values("job_id", "after")
    )
    assert all(n == 1 for n in admitted.values()), [k for k, n in admitted.items() if n > 1]
    per_job = Counter(job_id for job_id, _ in admitted)
    for job_id, run in Job.objects.filter(queue_id=queue_id).values_list("id", "run"):
        assert run == per_job.get(job_id, 0), (job_id, run, per_job.get(job_id, 0))
        assert set(range(1, run + 1)) == {r for j, r in admitted if j == job_id}
    return sum(admitted.values())


def test_concurrent_cycles_never_overcommit_and_apply_each_decision_once(settings: Any) -> None:
    # Simulated jobs of 60-600 s finish within 0.05-0.5 s: completions race the cycles too,
    # and free capacity to decide on again however fast the machine runs the rounds (at
    # 600x a 2-core machine finished too few for the count below: 80 to 100 admissions).
    settings.DEMO_TIME_FACTOR = 1200
    queue = make_queue("race", CAPACITY)
    admin = make_admin("root")
    teams = [TeamFactory(name=f"t{i}") for i in range(3)]
    leads = [make_lead(team, f"lead{i}") for i, team in enumerate(teams)]
    shares = [
        make_share(
            queue,
            teams[0],
            "borrower",
            {G5: 1, P4: 1},
            policy="LEND_AND_BORROW",
            borrow_limit=-1,
            in_share_preemption=True,
        ),
        make_share(
            queue,
            teams[1],
            "lender",
            {G5: 2},
            policy="LEND",
            in_share_preemption=True,
            preemption_retries=2,
        ),
        make_share(queue, teams[2], "keeper", {G5: 1, P4: 1}, policy="RESERVE"),
    ]
    share_types = {shares[0].pk: [G5, P4], shares[1].pk: [G5], shares[2].pk: [G5, P4]}
    rng = random.Random(4)
    errors: list[BaseException] = []
    start = threading.Barrier(CYCLERS + 2)
    end = threading.Barrier(CYCLERS + 2)

    def mutate() -> None:
        for _ in range(rng.randint(0, 3)):
            i = rng.randrange(3)
            types = share_types[shares[i].pk]
            prefs = [
                {"instance_type": t, "count": rng.randint(1, 2)}
                for t in rng.sample(types, rng.randint(1, len(types)))
            ]
            jobs_svc.job_submit(
                actor=leads[i],
                share=shares[i].pk,
                name="j",
                preferences=prefs,
                priority=rng.randint(0, 9),
                duration=rng.randint(60, 600),
            )
        active = list(
            Job.objects.filter(
                queue=queue, state__in=(JobState.PENDING, JobState.RUNNING)
            ).values_list("id", "share_id")
        )
        lead_of = {s.pk: leads[i] for i, s in enumerate(shares)}
        for job_id, share_id in rng.sample(active, min(len(active), rng.randint(0, 2))):
            try:
                if rng.random() < 0.4:
                    jobs_svc.job_cancel(actor=lead_of[share_id], job=job_id)
                else:
                    jobs_svc.job_reprioritise(
                        actor=lead_of[share_id], job=job_id, priority=rng.randint(0, 9)
                    )
            except ServiceError:
                pass  # finished meanwhile: a refusal changes nothing
        if rng.random() < 0.15:
            share = Share.objects.get(pk=rng.choice(shares).pk)
            limits = {t: rng.randint(0, 3) for t in share_types[share.pk]}
            with contextlib.suppress(ServiceError):
                shares_svc.share_update(
                    actor=admin,
                    share=share.pk,
                    version=share.version,
                    changes={"limits": limits},
                    reason="random",
                )

    def worker(role: str) -> None:
        try:
            for _ in range(ROUNDS):
                start.wait()
                if role == "mutator":
                    mutate()
                else:
                    run_cycle(queue.pk)
                end.wait()
        except threading.BrokenBarrierError:
            pass
        except BaseException as error:  # surfaced by the main thread
            errors.append(error)
            start.abort()
            end.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=("cycler",)) for _ in range(CYCLERS)]
    threads.append(threading.Thread(target=worker, args=("mutator",)))
    for thread in threads:
        thread.start()
    capacity = capacity_of(queue.pk)
    peak: Counter[str] = Counter()
    try:
        for _ in range(ROUNDS):
            start.wait()
            end.wait()
            used = running_usage(queue.pk)
            for type_name, count in used.items():
                assert count <= capacity[type_name], (type_name, count, capacity)
                peak[type_name] = max(peak[type_name], count)
    except threading.BrokenBarrierError:
        pass
    finally:
        for thread in threads:
            thread.join(timeout=60)
    if errors:
        raise errors[0]

    admissions = assert_each_decision_applied_once(queue.pk)
    assert admissions > ROUNDS // 2  # the race had something to decide
    assert peak[G5] == capacity[G5]
    states = Counter(Job.objects.filter(queue=queue).values_list("state", flat=True))
    assert states[JobState.SUCCEEDED] > 0 and states[JobState.CANCELLED] > 0
    assert AuditEntry.objects.filter(event_type=AuditEvent.JOB_PREEMPTED).exists()


KILLER = """
import os, sys
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governance.settings")
django.setup()
from governance.services import runs
from scheduler.cycle.run import run_cycle

real_admit = runs.runs_admit

def admit_then_die(**kwargs):
    real_admit(**kwargs)
    os._exit(17)  # the worker dies mid-cycle: no rollback, no cleanup, no commit

runs.runs_admit = admit_then_die
run_cycle(int(sys.argv[1]))
os._exit(0)
"""


def test_a_worker_killed_mid_cycle_leaves_nothing_applied(monkeypatch: Any) -> None:
    # The submissions below must not ask for cycles: a Celery worker left running by the
    # live tests of this session would admit the jobs before the doomed worker could.
    monkeypatch.setattr(hooks.cycle_wanted, "receivers", [])
    queue = make_queue("kill", {G5: 4})
    team = TeamFactory(name="t")
    lead = make_lead(team, "lead")
    share = make_share(queue, team, "s", {G5: 4})
    jobs = [
        jobs_svc.job_submit(
            actor=lead,
            share=share.pk,
            name=f"j{i}",
            preferences=[{"instance_type": G5, "count": 1}],
        )
        for i in range(4)
    ]
    env = dict(
        os.environ,
        DATABASE_URL=database_url(connection.settings_dict),
        DJANGO_SETTINGS_MODULE="governance.settings",
    )
    done = subprocess.run(
        [sys.executable, "-c", KILLER, str(queue.pk)], cwd=ROOT, env=env, timeout=60
    )
    assert done.returncode == 17

    # Nothing of the dead worker's cycle is visible: no state, no run, no event, no audit.
    assert set(Job.objects.values_list("state", "run")) == {(JobState.PENDING, 0)}
    assert not AuditEntry.objects.filter(event_type=AuditEvent.JOB_ADMITTED).exists()
    assert not Job.objects.filter(events__type="admitted").exists()

    # The next cycle (it waits for the dead connection's locks to go) applies all of it once.
    result = run_cycle(queue.pk)
    assert result.admitted == 4
    assert set(Job.objects.values_list("state", "run")) == {(JobState.RUNNING, 1)}
    assert assert_each_decision_applied_once(queue.pk) == len(jobs)
    assert run_cycle(queue.pk).admitted == 0
