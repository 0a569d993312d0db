"""What the audit trail's hash chains cost writers (migrations 0010, 0033, 0037 and 0038).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything .venv/bin/python bench/audit_chain.py

Runs in a throwaway database ``bench_audit_<name>`` (dropped and re-created). Writer
threads commit transactions as the live path does, each in its own connection, closed
loop, for ``--seconds`` per phase, with ``1`` audit entry per transaction (a submission,
an agent report) and with ``20`` (a scheduling cycle that admits or preempts many jobs).
Each shape runs with one writer, with ``--threads`` writers each on a queue of its own
(every queue has its own chains and heads, docs/operations.md "Audit trail"), and with
as many writers all on one queue (its four lanes between them: one transaction's entries
join one lane), and each with the seal trigger (the chain) on and off, so the difference
is the chains' cost. Prints audited writes (entries) per second, transactions per
second, commit latency percentiles and how much of their time the writers spent waiting
on a lock (sampled from ``pg_stat_activity`` every 5 ms: on a machine short of CPU the
rates mostly measure the CPU, the lock waits still show a head writers share), then
verifies every chain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from throwaway import django_on_throwaway


def _setup() -> None:
    django_on_throwaway(
        "bench_audit", REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    )


def _phase(*, queues: list[int], entries: int, seconds: float) -> tuple[list[float], float]:
    """One writer per item of ``queues`` (a queue id each), closed loop: the commit
    latencies, and the share of the time writers spent waiting on a lock (%)."""
    from django.db import connections, transaction

    from governance.models import AuditEvent, Team
    from governance.services import audit

    team, _ = Team.objects.get_or_create(name="bench")
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    payload = {"state": "RUNNING", "instance_type": "ml.g5.xlarge", "preference": 0, "run": 1}

    def writer(queue_id: int) -> None:
        mine: list[float] = []
        try:
            while time.monotonic() < stop:
                started = time.perf_counter()
                with transaction.atomic():
                    for i in range(entries):
                        audit.record(
                            event_type=AuditEvent.JOB_ADMITTED,
                            actor=None,
                            subject=team,
                            before={"state": "PENDING"},
                            after={**payload, "i": i},
                            reason="Admitted on preference 0 within the share's limit.",
                            team_id=team.pk,
                            queue_id=queue_id,
                        )
                mine.append(time.perf_counter() - started)
        finally:
            connections.close_all()
            with lock:
                latencies.extend(mine)

    waits = [0, 0]  # writer-samples waiting on a lock, writer-samples

    def sampler() -> None:
        """How often writers wait on a lock (a chain head): sampled, not timed, so a busy
        machine's slowness does not hide it."""
        from django.db import connection

        try:
            with connection.cursor() as cursor:
                while time.monotonic() < stop:
                    cursor.execute(
                        "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock') "
                        "FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                    )
                    waits[0] += cursor.fetchone()[0]
                    waits[1] += len(queues)
                    time.sleep(0.005)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=writer, args=(q,)) for q in queues]
    workers.append(threading.Thread(target=sampler))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies, 100 * waits[0] / max(1, waits[1])


def _set_chain(on: bool) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE governance_auditentry "
            f"{'ENABLE' if on else 'DISABLE'} TRIGGER governance_auditentry_seal"
        )


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(-(-p * len(ordered) // 100)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=8, help="concurrent writers (N)")
    parser.add_argument(
        "--entries", type=int, action="append", help="entries per transaction (default 1 and 20)"
    )
    args = parser.parse_args()
    _setup()
    from governance.selectors.audit import verify_chain

    n = args.threads
    shapes = [
        ("1 writer", [1]),
        (f"{n} writers, {n} queues", list(range(1, n + 1))),
        (f"{n} writers, 1 queue", [1] * n),
    ]
    print(f"{os.cpu_count()} CPUs; {args.seconds:g} s per phase; writes = audit entries")
    print(
        f"{'writers':<22} {'entries/tx':>10} {'chain':>6} {'writes/s':>9} {'tx/s':>7} "
        f"{'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'lock wait':>9}"
    )
    for entries in args.entries or [1, 20]:
        for label, queues in shapes:
            for chained in (False, True):
                _set_chain(chained)
                latencies, waiting = _phase(queues=queues, entries=entries, seconds=args.seconds)
                rate = len(latencies) / args.seconds
                print(
                    f"{label:<22} {entries:>10} {'on' if chained else 'off':>6} "
                    f"{rate * entries:>9.0f} {rate:>7.0f} "
                    f"{1000 * statistics.median(latencies):>7.1f} "
                    f"{1000 * _pct(latencies, 95):>7.1f} {1000 * _pct(latencies, 99):>7.1f} "
                    f"{waiting:>8.0f}%",
                    flush=True,
                )
    _set_chain(True)
    from django.db import connection

    with connection.cursor() as cursor:
        # The unchained phases' entries are not in the chain; verify the chained ones only.
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("DELETE FROM governance_auditentry WHERE chain_seq IS NULL")
        cursor.execute("SET session_replication_role = DEFAULT")
    started = time.perf_counter()
    report = verify_chain()
    took = time.perf_counter() - started
    print(
        f"audit_verify: {report.checked} entries in {took:.2f} s "
        f"({report.checked / took:,.0f}/s), {'intact' if report.broken is None else report.broken}"
    )


if __name__ == "__main__":
    main()
