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

from governance import demo, tasks
from governance.models import AuditChainHead, AuditCheckpoint, AuditEntry, AuditEvent, Team
from governance.selectors.audit import verify_chain
from governance.services import audit
from tests.factories import UserFactory


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


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        "reason = 'rewritten'",
        "after = '{\"n\": 99}'::jsonb",
        "actor_id = NULL",
        "before = '{}'::jsonb",
        "created_at = created_at + interval '1 microsecond'",
        "chain = 'queue-1'",
    ],
)
def test_an_unsealed_entry_gets_only_its_chain_columns(change: str) -> None:
    """Before the seal (inside the writing transaction), the one update the trail allows
    is the seal's: the chain columns, every other column as written. Any other column
    changed with them is refused, a value made null or a null given a value included."""
    actor = UserFactory(username="unsealed-actor")
    entry = audit.record(
        event_type=AuditEvent.TEAM_UPDATED,
        actor=actor,
        subject=Team.objects.create(name="unsealed"),
        after={"n": 1},
    )
    link = "chain_seq = 1, prev_hash = repeat('0', 64), hash = repeat('a', 64)"
    with pytest.raises(Exception, match="append-only"), transaction.atomic():
        sql(f"UPDATE governance_auditentry SET {link}, {change} WHERE id = %s", entry.pk)
    with transaction.atomic():  # the seal's own update, for comparison, goes through
        sql(f"UPDATE governance_auditentry SET {link} WHERE id = %s", entry.pk)
        transaction.set_rollback(True)


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


# --- the trail against its own database (the security review) -------------------------


def sql(statement: str, *params: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def signed_entries(n: int) -> list[AuditEntry]:
    """``n`` entries, sealed, and the head signed with the audit key (beat's task)."""
    entries = write_entries(n)
    assert tasks.audit_checkpoint() is True
    return entries


def reseal_from(chain_seq: int) -> None:
    """Re-seal the chain from ``chain_seq`` on with the database's own hash function and
    move the head to the new end: what someone with the owner's rights can do."""
    tamper(
        f"""
        DO $$
        DECLARE
            e governance_auditentry%%ROWTYPE;
            last text;
        BEGIN
            SELECT hash INTO last FROM governance_auditentry
             WHERE chain = 'site' AND chain_seq = {chain_seq - 1};
            FOR e IN SELECT * FROM governance_auditentry
                      WHERE chain = 'site' AND chain_seq >= {chain_seq} ORDER BY chain_seq LOOP
                e.prev_hash := last;
                e.hash := governance_audit_entry_hash(e, last);
                UPDATE governance_auditentry SET prev_hash = e.prev_hash, hash = e.hash
                 WHERE id = e.id;
                last := e.hash;
            END LOOP;
            UPDATE governance_auditchainhead SET last_hash = last WHERE chain = 'site';
        END;
        $$
        """
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "table", ["governance_auditentry", "governance_auditchainhead", "governance_auditcheckpoint"]
)
def test_truncate_is_refused_even_for_the_tables_owner(table: str) -> None:
    signed_entries(2)  # committed: TRUNCATE refuses a table with a seal still pending
    with pytest.raises(Exception, match="append-only"), transaction.atomic():
        sql(f"TRUNCATE {table} CASCADE")
    assert AuditEntry.objects.count() >= 2


@pytest.mark.django_db
def test_the_products_role_appends_but_cannot_change_remove_or_empty_the_trail(
    settings: Any,
) -> None:
    """The product runs as DATABASE_APP_ROLE: it writes entries (the seal moves the head
    with its owner's rights) and may not touch them afterwards."""
    role = settings.DATABASE_APP_ROLE
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableowner FROM pg_tables WHERE tablename LIKE 'governance_audit%%'")
        assert role not in {owner for (owner,) in cursor.fetchall()}
    entry = write_entries(1)[0]
    with transaction.atomic():
        sql(f'SET LOCAL ROLE "{role}"')
        appended = write_entries(2)  # appended and sealed as the product's role
        assert tasks.audit_checkpoint() is True
    assert AuditEntry.objects.get(pk=appended[-1].pk).hash is not None
    for attack in (
        "UPDATE governance_auditentry SET reason = 'x' WHERE id = %s",
        "DELETE FROM governance_auditentry WHERE id = %s",
        "TRUNCATE governance_auditentry",
        "UPDATE governance_auditchainhead SET last_seq = 0 WHERE chain = 'site' AND %s > 0",
        "DELETE FROM governance_auditchainhead WHERE %s > 0",
        "TRUNCATE governance_auditchainhead",
        "UPDATE governance_auditcheckpoint SET mac = '' WHERE %s > 0",
        "DELETE FROM governance_auditcheckpoint WHERE %s > 0",
        "TRUNCATE governance_auditcheckpoint",
    ):
        with pytest.raises(Exception, match="permission denied"), transaction.atomic():
            sql(f'SET LOCAL ROLE "{role}"')
            sql(attack, *([entry.pk] if "%s" in attack else []))
    assert verify_chain().broken is None


@pytest.mark.django_db(transaction=True)
def test_an_emptied_trail_is_found() -> None:
    signed_entries(4)  # committed: TRUNCATE refuses a table with a seal still pending
    tamper("TRUNCATE governance_auditentry")
    report = verify_chain()
    assert report.broken is not None and "the newest entries were removed" in report.broken
    with pytest.raises(CommandError, match="audit chain broken"):
        call_command("audit_verify", stdout=StringIO())


@pytest.mark.django_db
def test_removing_the_newest_entries_and_moving_the_head_back_is_found() -> None:
    entries = signed_entries(5)
    kept = AuditEntry.objects.get(pk=entries[1].pk)
    tamper("DELETE FROM governance_auditentry WHERE chain_seq > %s", kept.chain_seq)
    tamper(
        "UPDATE governance_auditchainhead SET last_seq = %s, last_hash = %s WHERE chain = 'site'",
        kept.chain_seq,
        kept.hash,
    )
    report = verify_chain()
    assert report.broken is not None
    assert f"but the trail ends at link {kept.chain_seq}" in report.broken


@pytest.mark.django_db
def test_a_missing_or_moved_back_head_is_found() -> None:
    signed_entries(3)
    head = AuditChainHead.objects.get()
    tamper("UPDATE governance_auditchainhead SET last_seq = last_seq - 1 WHERE chain = 'site'")
    report = verify_chain()
    assert report.broken is not None and "the chain head is behind" in report.broken
    tamper("DELETE FROM governance_auditchainhead WHERE chain = 'site'")
    report = verify_chain()
    assert report.broken is not None and "the chain head is missing" in report.broken
    # Only the seal moves the head: a statement of its own is refused, even the owner's.
    with pytest.raises(Exception, match="moved only by the audit trigger"), transaction.atomic():
        sql(
            "INSERT INTO governance_auditchainhead (chain, last_seq, last_hash) "
            "VALUES ('site', %s, %s)",
            head.last_seq,
            head.last_hash,
        )


@pytest.mark.django_db
def test_a_changed_entry_re_sealed_with_the_databases_hash_function_is_found() -> None:
    entries = signed_entries(5)
    victim = AuditEntry.objects.get(pk=entries[1].pk)
    tamper("UPDATE governance_auditentry SET reason = 'nothing happened' WHERE id = %s", victim.pk)
    reseal_from(victim.chain_seq)
    report = verify_chain()
    assert report.broken is not None
    assert "not the link the audit key signed" in report.broken
    assert report.entry_id == entries[-1].pk  # the signed head no longer matches


@pytest.mark.django_db
def test_a_hash_function_replaced_in_the_database_does_not_hide_a_change() -> None:
    entries = signed_entries(3)
    sql(
        "CREATE OR REPLACE FUNCTION governance_audit_entry_hash(e governance_auditentry, "
        "prev text) RETURNS text LANGUAGE sql STABLE AS $$ SELECT e.hash $$"
    )
    tamper("UPDATE governance_auditentry SET reason = 'x' WHERE id = %s", entries[0].pk)
    report = verify_chain()
    assert report.entry_id == entries[0].pk
    assert report.broken is not None and "changed after it was written" in report.broken


@pytest.mark.django_db
def test_checkpoints_verify_only_under_the_audit_key(settings: Any) -> None:
    signed_entries(2)
    signed = AuditCheckpoint.objects.get()
    assert tasks.audit_checkpoint() is False  # the head has not moved: nothing to sign
    old_key = settings.AUDIT_KEY
    settings.AUDIT_KEY = "a-rotated-key-" + "x" * 40
    report = verify_chain()
    assert report.broken is not None and f"audit key {signed.key_id}" in report.broken
    settings.AUDIT_OLD_KEYS = [old_key]  # the rotation keeps the old key for checking
    assert verify_chain().broken is None
    settings.AUDIT_OLD_KEYS = []
    settings.AUDIT_LOST_KEY_IDS = [signed.key_id]  # a lost key: reported, not checked
    report = verify_chain()
    assert report.broken is None and report.unchecked_checkpoints == 1
    settings.AUDIT_KEY, settings.AUDIT_LOST_KEY_IDS = old_key, []
    tamper("UPDATE governance_auditcheckpoint SET mac = %s", "0" * 64)
    report = verify_chain()
    assert report.broken is not None and "does not verify under audit key" in report.broken


@pytest.mark.django_db
def test_audit_verify_says_how_far_the_key_vouches() -> None:
    signed_entries(2)
    write_entries(3)
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert "audit chain intact" in out.getvalue()
    assert "(3 newer entries not signed yet)" in out.getvalue()


@pytest.mark.django_db
def test_a_head_kept_outside_the_database_catches_what_the_database_cannot() -> None:
    """Removing the newest entries together with their signatures, and moving the head
    back, leaves a trail that verifies on its own; the head printed earlier and kept
    elsewhere (``audit_verify --expect``) does not match it."""
    entries = signed_entries(3)
    out = StringIO()
    call_command("audit_verify", stdout=out)
    recorded = out.getvalue().split(" head ")[1].split()[0]
    write_entries(1)  # the trail goes on: the recorded link is still in it
    call_command("audit_verify", "--expect", recorded, stdout=StringIO())
    kept = AuditEntry.objects.get(pk=entries[0].pk)
    tamper("DELETE FROM governance_auditentry WHERE chain_seq > %s", kept.chain_seq)
    tamper("DELETE FROM governance_auditcheckpoint")
    tamper(
        "UPDATE governance_auditchainhead SET last_seq = %s, last_hash = %s WHERE chain = 'site'",
        kept.chain_seq,
        kept.hash,
    )
    assert verify_chain().broken is None  # nothing inside the database tells
    with pytest.raises(CommandError, match="recorded outside the database"):
        call_command("audit_verify", "--expect", recorded, stdout=StringIO())
    with pytest.raises(CommandError, match="LINK:HASH"):
        call_command("audit_verify", "--expect", "nonsense", stdout=StringIO())
