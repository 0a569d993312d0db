"""One audit chain per queue and one for the site (migration 0033): each chain verified
on its own and all of them together, tampering found in whichever chain it is, and
writers on different queues never waiting for one another's chain head."""

from __future__ import annotations

import itertools
import threading
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection, connections, transaction

from governance import tasks
from governance.models import AuditChainHead, AuditCheckpoint, AuditEntry, AuditEvent, Team
from governance.selectors.audit import verify_chain
from governance.services import audit
from tests.services.test_audit_chain import seal_now, tamper, write_entries

QUEUES = (101, 102)


def queue_entries(queue_id: int, n: int, *, team: Team | None = None) -> list[AuditEntry]:
    """``n`` entries about queue ``queue_id`` (its chain), not yet sealed."""
    team = team or Team.objects.get_or_create(name=f"chains-{queue_id}")[0]
    return [
        audit.record(
            event_type=AuditEvent.QUEUE_UPDATED,
            actor=None,
            subject=team,
            after={"queue": queue_id, "i": i},
            reason=f"step {i}",
            queue_id=queue_id,
        )
        for i in range(n)
    ]


def three_chains(n: int = 4) -> dict[str, list[AuditEntry]]:
    """``n`` entries in each of the site chain and two queue chains, interleaved, sealed."""
    written: dict[str, list[AuditEntry]] = {"site": [], "queue-101": [], "queue-102": []}
    for _ in range(n):
        written["site"] += write_entries(1)
        written["queue-101"] += queue_entries(101, 1)
        written["queue-102"] += queue_entries(102, 1)
    seal_now()
    return written


def fresh(entry: AuditEntry) -> AuditEntry:
    return AuditEntry.objects.get(pk=entry.pk)


@pytest.mark.django_db
def test_each_queue_and_the_site_have_a_chain_of_their_own() -> None:
    written = three_chains()
    for chain, entries in written.items():
        rows = list(
            AuditEntry.objects.filter(chain=chain)
            .order_by("chain_seq")
            .values("id", "chain_seq", "prev_hash", "hash")
        )
        assert [r["id"] for r in rows] == [e.pk for e in entries]
        assert [r["chain_seq"] for r in rows] == list(range(1, len(entries) + 1))
        for before, after in itertools.pairwise(rows):
            assert after["prev_hash"] == before["hash"]
        head = AuditChainHead.objects.get(chain=chain)
        assert (head.last_seq, head.last_hash) == (len(entries), rows[-1]["hash"])
    report = verify_chain()
    assert report.broken is None
    assert report.checked == 12
    assert {s.chain: s.last_seq for s in report.chains} == {
        "site": 4,
        "queue-101": 4,
        "queue-102": 4,
    }


@pytest.mark.django_db
def test_the_chain_follows_the_queue_whatever_the_writer_says() -> None:
    team = Team.objects.create(name="liar")
    entry = audit.entry_for(
        event_type=AuditEvent.QUEUE_UPDATED, actor=None, subject=team, queue_id=101
    )
    entry.chain = "site"
    entry.save()
    seal_now()
    assert fresh(entry).chain == "queue-101"


@pytest.mark.django_db
def test_a_note_of_chains_set_by_the_writer_creates_no_head_of_its_own() -> None:
    """The seal reads which heads to lock from a note the insert trigger keeps in the
    transaction; a writer may set it too, but only chain names the trigger makes count."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL governance.audit_chains = 'evil,site'")
    write_entries(1)
    assert not AuditChainHead.objects.filter(chain="evil").exists()
    assert verify_chain().broken is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("attack", "found"),
    [
        ("UPDATE governance_auditentry SET reason = 'x' WHERE id = {victim}", "changed after"),
        ("DELETE FROM governance_auditentry WHERE id = {victim}", "were removed"),
        # reorder: two links of the chain swap places
        (
            "UPDATE governance_auditentry SET chain_seq = CASE id WHEN {victim} THEN {seq} + 1 "
            "ELSE {seq} END WHERE id IN ({victim}, {next})",
            "does not point at",
        ),
        # truncation: the chain's newest entries removed
        (
            "DELETE FROM governance_auditentry WHERE chain = '{chain}' AND chain_seq >= {seq}",
            "the newest entries were removed",
        ),
    ],
    ids=["edit", "delete", "reorder", "truncate"],
)
@pytest.mark.parametrize("chain", ["site", "queue-101", "queue-102"])
def test_tampering_is_found_in_each_chain(chain: str, attack: str, found: str) -> None:
    written = three_chains()
    victim, after_it = fresh(written[chain][1]), written[chain][2]
    tamper(attack.format(victim=victim.pk, next=after_it.pk, seq=victim.chain_seq, chain=chain))
    report = verify_chain()
    assert report.broken is not None and found in report.broken
    assert report.chain == chain
    assert f"chain {chain}:" in report.broken
    with pytest.raises(CommandError, match=f"chain {chain}: "):
        call_command("audit_verify", stdout=StringIO())


@pytest.mark.django_db
def test_an_entry_moved_to_another_chain_breaks_both() -> None:
    written = three_chains()
    moved = written["queue-101"][1]
    tamper("UPDATE governance_auditentry SET chain = 'queue-102' WHERE id = %s", moved.pk)
    report = verify_chain()
    assert report.broken is not None and report.chain == "queue-101"
    assert "were removed" in report.broken  # its old chain skips a link
    # Put back in its old chain with a place in the other, the other chain breaks.
    tamper("UPDATE governance_auditentry SET chain = 'queue-101' WHERE id = %s", moved.pk)
    assert verify_chain().broken is None
    tamper(
        "UPDATE governance_auditentry SET chain = 'queue-102', chain_seq = 5 WHERE id = %s",
        moved.pk,
    )
    report = verify_chain()
    assert report.broken is not None and report.chain == "queue-101"


@pytest.mark.django_db
def test_entries_swapped_between_chains_are_found() -> None:
    written = three_chains()
    a, b = fresh(written["queue-101"][2]), fresh(written["queue-102"][2])
    tamper(
        "UPDATE governance_auditentry SET chain = CASE chain WHEN 'queue-101' THEN 'queue-102' "
        "ELSE 'queue-101' END WHERE id IN (%s, %s)",
        a.pk,
        b.pk,
    )
    report = verify_chain()
    assert report.broken is not None and "does not point at" in report.broken


@pytest.mark.django_db
def test_a_whole_chain_removed_is_found_by_its_signature_or_its_head() -> None:
    three_chains()
    assert tasks.audit_checkpoint() is True
    signed = {c.chain for c in AuditCheckpoint.objects.all()}
    assert signed == {"site", "queue-101", "queue-102"}
    assert tasks.audit_checkpoint() is False  # no head moved since
    tamper("DELETE FROM governance_auditentry WHERE chain = 'queue-102'")
    report = verify_chain()
    assert report.broken is not None and report.chain == "queue-102"
    assert "the audit key signed link 4" in report.broken
    tamper("DELETE FROM governance_auditchainhead WHERE chain = 'queue-102'")
    assert verify_chain().chain == "queue-102"


@pytest.mark.django_db
def test_a_missing_queue_head_is_found() -> None:
    three_chains()
    tamper("DELETE FROM governance_auditchainhead WHERE chain = 'queue-101'")
    report = verify_chain()
    assert report.broken == "chain queue-101: the chain head is missing: it was deleted"


@pytest.mark.django_db
def test_a_checkpoint_signs_one_chain_and_cannot_vouch_for_another() -> None:
    three_chains()
    tasks.audit_checkpoint()
    # queue 101's signature passed off as queue 102's (same link number, same hash)
    tamper("DELETE FROM governance_auditcheckpoint WHERE chain = 'queue-102'")
    tamper("UPDATE governance_auditcheckpoint SET chain = 'queue-102' WHERE chain = 'queue-101'")
    report = verify_chain()
    assert report.broken is not None and "does not verify under audit key" in report.broken


@pytest.mark.django_db
def test_audit_verify_prints_and_holds_each_chains_head() -> None:
    three_chains(2)
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert "audit chain intact: 6 entries in 3 chains" in out.getvalue()
    heads = [part.split()[0] for part in out.getvalue().split(" head ")[1:]]
    assert [h.split(":")[0] for h in heads] == ["queue-101", "queue-102", "site"]
    queue_entries(101, 1)
    seal_now()
    call_command("audit_verify", *[f"--expect={h}" for h in heads], stdout=StringIO())
    tamper("DELETE FROM governance_auditentry WHERE chain = 'queue-101' AND chain_seq > 1")
    tamper(
        "UPDATE governance_auditchainhead h SET last_seq = 1, last_hash = e.hash "
        "FROM governance_auditentry e WHERE h.chain = 'queue-101' AND e.chain = h.chain"
    )
    assert verify_chain().broken is None  # nothing inside the database tells
    with pytest.raises(CommandError, match=r"chain queue-101: .* recorded outside the database"):
        call_command("audit_verify", *[f"--expect={h}" for h in heads], stdout=StringIO())


@pytest.mark.django_db
def test_the_products_role_starts_and_extends_queue_chains_but_cannot_move_a_head(
    settings: Any,
) -> None:
    """The seal creates a queue's head on its first entry with its owner's rights: the
    product's role only reads the heads."""
    role = settings.DATABASE_APP_ROLE
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f'SET LOCAL ROLE "{role}"')
        queue_entries(103, 2)
        seal_now()
    assert AuditChainHead.objects.get(chain="queue-103").last_seq == 2
    with (
        pytest.raises(Exception, match="permission denied"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(f'SET LOCAL ROLE "{role}"')
        cursor.execute(
            "INSERT INTO governance_auditchainhead (chain, last_seq, last_hash) "
            "VALUES ('queue-104', 0, %s)",
            ["0" * 64],
        )
    assert verify_chain().broken is None


# --- writers on different queues: real connections, real commits -----------------------


def _writer(team: Team, queue_id: int, holding: threading.Event, release: threading.Event) -> None:
    """Write an entry on ``queue_id``, seal it now (its chain's head locked until commit),
    say so and keep the transaction open until ``release``."""
    try:
        with transaction.atomic():
            queue_entries(queue_id, 1, team=team)
            seal_now()
            holding.set()
            release.wait(timeout=60)
    finally:
        connections.close_all()


def _try_write(team: Team, queue_id: int, outcome: dict[int, Any]) -> None:
    """Write and commit an entry on ``queue_id``, giving up on any lock it would wait for."""
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            entry = queue_entries(queue_id, 1, team=team)[0]
        outcome[queue_id] = AuditEntry.objects.get(pk=entry.pk).chain_seq
    except OperationalError as exc:
        outcome[queue_id] = exc
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_writer_holding_its_queues_head_does_not_hold_another_queue() -> None:
    """While one transaction holds queue 101's chain head (sealed, not committed), a
    writer on queue 102 commits without waiting for it, and one on queue 101 would wait
    (the control: it gives up at its lock timeout). Both chains verify afterwards."""
    team = Team.objects.create(name="holders")
    holding, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_writer, args=(team, 101, holding, release))
    holder.start()
    try:
        assert holding.wait(timeout=60)
        outcome: dict[int, Any] = {}
        for queue_id in (102, 101):
            other = threading.Thread(target=_try_write, args=(team, queue_id, outcome))
            other.start()
            other.join()
    finally:
        release.set()
        holder.join()
    assert outcome[102] == 1  # sealed and committed while queue 101's head was held
    assert isinstance(outcome[101], OperationalError) and "lock timeout" in str(outcome[101])
    report = verify_chain()
    assert report.broken is None
    assert {s.chain: s.last_seq for s in report.chains if s.last_seq} == {
        "queue-101": 1,
        "queue-102": 1,
    }


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_across_queues_and_the_site_keep_every_chain_whole() -> None:
    """Writers commit transactions that each touch two chains, half of them in one order
    and half in the other: the seal takes heads in one order, so none deadlocks."""
    team = Team.objects.create(name="concurrent-chains")
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        first, second = (101, None) if k % 2 else (None, 101)
        try:
            for i in range(10):
                with transaction.atomic():
                    for queue_id in (first, second, 100 + k % 3):
                        audit.record(
                            event_type=AuditEvent.TEAM_UPDATED,
                            actor=None,
                            subject=team,
                            after={"writer": k, "i": i},
                            queue_id=queue_id,
                        )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    report = verify_chain()
    assert report.broken is None
    assert report.checked == AuditEntry.objects.count() == 6 * 10 * 3
    assert {s.chain for s in report.chains if s.last_seq} == {
        "site",
        "queue-100",
        "queue-101",
        "queue-102",
    }
