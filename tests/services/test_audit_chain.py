"""The audit trail's hash chain: sealed at commit, verified link by link, and a row changed
behind the application's back (its trigger disabled) is found."""

from __future__ import annotations

import itertools
import threading
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction

from governance import demo
from governance.models import AuditChainHead, AuditEntry, AuditEvent, Team
from governance.selectors.audit import verify_chain
from governance.services import audit


def seal_now() -> None:
    """Fire the seal trigger now instead of at commit (tests run in a transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS governance_auditentry_seal IMMEDIATE")
        cursor.execute("SET CONSTRAINTS governance_auditentry_seal DEFERRED")


def tamper(sql: str, *params: Any) -> None:
    """Change the trail as someone with database access would: with its triggers off
    (``session_replication_role = replica`` skips ordinary triggers for the session)."""
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        try:
            cursor.execute(sql, params)
        finally:
            cursor.execute("SET session_replication_role = DEFAULT")


def write_entries(n: int) -> list[AuditEntry]:
    team = Team.objects.create(name=f"chain-{Team.objects.count()}")
    entries = [
        audit.record(
            event_type=AuditEvent.TEAM_UPDATED,
            actor=None,
            subject=team,
            before={"n": i},
            after={"n": i + 1, "text": "ünïcode"},
            reason=f"step {i}",
        )
        for i in range(n)
    ]
    seal_now()
    return entries


@pytest.mark.django_db
def test_entries_are_chained_in_order_and_verify() -> None:
    entries = write_entries(5)
    rows = list(AuditEntry.objects.order_by("chain_seq").values("id", "prev_hash", "hash"))
    assert [r["id"] for r in rows][-5:] == [e.pk for e in entries]
    for before, after in itertools.pairwise(rows):
        assert after["prev_hash"] == before["hash"]
    assert all(r["hash"] and len(r["hash"]) == 64 for r in rows)
    report = verify_chain()
    assert report.broken is None
    assert report.checked == len(rows)
    assert AuditChainHead.objects.get().last_hash == rows[-1]["hash"]


@pytest.mark.django_db
def test_a_changed_row_is_named() -> None:
    entries = write_entries(6)
    target = entries[3]
    tamper("UPDATE governance_auditentry SET reason = 'nothing happened' WHERE id = %s", target.pk)
    report = verify_chain()
    assert report.entry_id == target.pk
    assert report.broken is not None and "changed after it was written" in report.broken
    with pytest.raises(CommandError, match=f"entry {target.pk} "):
        call_command("audit_verify", stdout=StringIO())


@pytest.mark.django_db
def test_a_rehashed_row_still_breaks_the_next_link() -> None:
    """Recomputing the changed row's own hash does not help: the next entry points at the
    old one."""
    entries = write_entries(4)
    target = entries[1]
    tamper("UPDATE governance_auditentry SET reason = 'x' WHERE id = %s", target.pk)
    tamper(
        "UPDATE governance_auditentry e SET hash = governance_audit_entry_hash(e, e.prev_hash) "
        "WHERE e.id = %s",
        target.pk,
    )
    report = verify_chain()
    assert report.entry_id == entries[2].pk
    assert report.broken is not None and "does not point at" in report.broken


@pytest.mark.django_db
def test_removed_rows_are_found() -> None:
    entries = write_entries(5)
    tamper("DELETE FROM governance_auditentry WHERE id = %s", entries[2].pk)
    report = verify_chain()
    assert report.entry_id == entries[3].pk
    assert report.broken is not None and "were removed" in report.broken


@pytest.mark.django_db
def test_removing_the_newest_entry_is_found_at_the_head() -> None:
    entries = write_entries(3)
    tamper("DELETE FROM governance_auditentry WHERE id = %s", entries[-1].pk)
    report = verify_chain()
    assert report.broken is not None and "chain head" in report.broken


@pytest.mark.django_db
def test_an_entry_inserted_around_the_trigger_is_found() -> None:
    write_entries(2)
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        forged = audit.record(
            event_type=AuditEvent.TEAM_UPDATED, actor=None, subject=Team.objects.first()
        )
        cursor.execute("SET session_replication_role = DEFAULT")
    report = verify_chain()
    assert report.entry_id == forged.pk
    assert report.broken is not None and "not in the chain" in report.broken


@pytest.mark.django_db
def test_sealed_entries_stay_append_only() -> None:
    entry = write_entries(1)[0]
    with pytest.raises(Exception, match="append-only"), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).update(hash="0" * 64)


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_keep_one_unbroken_chain() -> None:
    """Eight threads, each committing entries in many small transactions at once."""
    team = Team.objects.create(name="concurrent")
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(15):
                with transaction.atomic():
                    for j in range(2):
                        audit.record(
                            event_type=AuditEvent.TEAM_UPDATED,
                            actor=None,
                            subject=team,
                            after={"writer": k, "i": i, "j": j},
                        )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    report = verify_chain()
    assert report.broken is None
    assert report.checked == AuditEntry.objects.count() == 8 * 15 * 2
    assert not AuditEntry.objects.filter(hash__isnull=True).exists()


@pytest.mark.django_db
def test_demo_verifies_and_a_tampered_row_fails(tmp_path: Path) -> None:
    demo.load(tmp_path)
    seal_now()
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert "audit chain intact" in out.getvalue()
    victim = AuditEntry.objects.filter(event_type="share.created").order_by("chain_seq")[1]
    tamper(
        "UPDATE governance_auditentry SET after = after || '{\"borrow_limit\": 0}' WHERE id = %s",
        victim.pk,
    )
    with pytest.raises(CommandError, match=f"entry {victim.pk} "):
        call_command("audit_verify", stdout=StringIO())
