"""What the audit trail's hash chain costs writers (migration 0008).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/anything .venv/bin/python bench/audit_chain.py

Runs in a throwaway database ``bench_audit_<name>`` (dropped and re-created). Writer
threads commit transactions as the live path does, each in its own connection, closed
loop, for ``--seconds`` per phase: ``1`` audit entry per transaction (a submission, an
agent report) and ``20`` (a scheduling cycle that admits or preempts many jobs). Each
phase runs twice: with the seal trigger (the chain) and with it disabled, so the
difference is the chain's cost. Prints transactions and entries per second and commit
latency percentiles. ``bench/live.py`` runs at 50 submissions per second; the figures
show how far above that the chain's one-writer-at-a-time commit lets the trail go.
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


def _phase(*, threads: int, entries: int, seconds: float) -> tuple[int, list[float]]:
    from django.db import connections, transaction

    from governance.models import AuditEvent, Team
    from governance.services import audit

    team, _ = Team.objects.get_or_create(name="bench")
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    payload = {"state": "RUNNING", "instance_type": "ml.g5.xlarge", "preference": 0, "run": 1}

    def writer() -> None:
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
                        )
                mine.append(time.perf_counter() - started)
        finally:
            connections.close_all()
            with lock:
                latencies.extend(mine)

    workers = [threading.Thread(target=writer) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return len(latencies), latencies


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
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    _setup()
    from governance.selectors.audit import verify_chain

    print(
        f"{'entries/tx':>10} {'chain':>6} {'tx/s':>8} {'entries/s':>10} "
        f"{'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}"
    )
    for entries in (1, 20):
        for chained in (False, True):
            _set_chain(chained)
            count, latencies = _phase(threads=args.threads, entries=entries, seconds=args.seconds)
            rate = count / args.seconds
            print(
                f"{entries:>10} {'on' if chained else 'off':>6} {rate:>8.0f} "
                f"{rate * entries:>10.0f} {1000 * statistics.median(latencies):>8.1f} "
                f"{1000 * _pct(latencies, 95):>8.1f} {1000 * _pct(latencies, 99):>8.1f}",
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
