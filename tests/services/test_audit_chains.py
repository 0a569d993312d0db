"""The audit chains: the site's, and per queue its cycles' chain and four lanes for its
other writers (migrations 0033 and 0038). Each chain verified on its own and all of them
together, tampering found in whichever chain it is, writers on different queues never
waiting for one another's chain head, and a queue's submissions not waiting for its
cycle's."""

from __future__ import annotations

import itertools
import re
import threading
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection, connections, models, transaction

from governance import tasks
from governance.models import AuditChainHead, AuditCheckpoint, AuditEntry, AuditEvent, Team
from governance.selectors.audit import verify_chain
from governance.services import audit, jobs
from scheduler.cycle.run import run_cycle
from tests.factories import make_world
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


def fresh(entry: AuditEntry) -> AuditEntry:
    return AuditEntry.objects.get(pk=entry.pk)


def lane_of(entry: AuditEntry) -> str:
    """The chain ``entry`` joined, checked to be one of its queue's four lanes."""
    chain = fresh(entry).chain
    assert re.fullmatch(rf"queue-{entry.queue_id}\.[1-4]", chain), chain
    return chain


def three_chains(n: int = 4) -> dict[str, list[AuditEntry]]:
    """``n`` entries in each of the site chain and a lane of queues 101 and 102,
    interleaved, sealed; by chain name (the test's one transaction picks the lane)."""
    site: list[AuditEntry] = []
    first: list[AuditEntry] = []
    second: list[AuditEntry] = []
    for _ in range(n):
        site += write_entries(1)
        first += queue_entries(101, 1)
        second += queue_entries(102, 1)
    seal_now()
    return {"site": site, lane_of(first[0]): first, lane_of(second[0]): second}


def named(written: dict[str, list[AuditEntry]], label: str) -> str:
    """The chain ``label`` (``site``, ``queue-101``, ``queue-102``) stands for in ``written``."""
    return next(c for c in written if c == label or c.startswith(f"{label}."))


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
    assert {s.chain: s.last_seq for s in report.chains} == dict.fromkeys(written, 4)
    # one transaction: the same lane number in both queues
    assert len({chain.partition(".")[2] for chain in written} - {""}) == 1


@pytest.mark.django_db
def test_the_chain_follows_the_queue_whatever_the_writer_says() -> None:
    team = Team.objects.create(name="liar")
    entry = audit.entry_for(
        event_type=AuditEvent.QUEUE_UPDATED, actor=None, subject=team, queue_id=101
    )
    entry.chain = "site"
    entry.save()
    seal_now()
    lane_of(entry)
    other = queue_entries(101, 1)[0]
    with connection.cursor() as cursor:  # a lane is the writer's to choose, a queue is not
        cursor.execute("SET LOCAL governance.audit_lane = 'cycle'")
    entry = audit.entry_for(
        event_type=AuditEvent.QUEUE_UPDATED, actor=None, subject=team, queue_id=101
    )
    entry.chain = "queue-102"
    entry.save()
    seal_now()
    assert fresh(entry).chain == "queue-101"
    assert lane_of(other) != "queue-101"


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
@pytest.mark.parametrize("label", ["site", "queue-101", "queue-102"])
def test_tampering_is_found_in_each_chain(label: str, attack: str, found: str) -> None:
    written = three_chains()
    chain = named(written, label)
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
    first, second = named(written, "queue-101"), named(written, "queue-102")
    moved = written[first][1]
    tamper("UPDATE governance_auditentry SET chain = %s WHERE id = %s", second, moved.pk)
    report = verify_chain()
    assert report.broken is not None and report.chain == first
    assert "were removed" in report.broken  # its old chain skips a link
    # Put back in its old chain with a place in the other, the other chain breaks.
    tamper("UPDATE governance_auditentry SET chain = %s WHERE id = %s", first, moved.pk)
    assert verify_chain().broken is None
    tamper(
        "UPDATE governance_auditentry SET chain = %s, chain_seq = 5 WHERE id = %s",
        second,
        moved.pk,
    )
    report = verify_chain()
    assert report.broken is not None and report.chain == first
    # Into another chain of its own queue: the same (the first broken chain is named).
    tamper("UPDATE governance_auditentry SET chain = 'queue-101' WHERE id = %s", moved.pk)
    assert verify_chain().chain in {"queue-101", first}


@pytest.mark.django_db
def test_entries_swapped_between_chains_are_found() -> None:
    written = three_chains()
    first, second = named(written, "queue-101"), named(written, "queue-102")
    a, b = fresh(written[first][2]), fresh(written[second][2])
    tamper(
        "UPDATE governance_auditentry SET chain = CASE chain WHEN %s THEN %s ELSE %s END "
        "WHERE id IN (%s, %s)",
        first,
        second,
        first,
        a.pk,
        b.pk,
    )
    report = verify_chain()
    assert report.broken is not None and "does not point at" in report.broken


@pytest.mark.django_db
def test_a_whole_chain_removed_is_found_by_its_signature_or_its_head() -> None:
    written = three_chains()
    assert tasks.audit_checkpoint() is True
    signed = {c.chain for c in AuditCheckpoint.objects.all()}
    assert signed == set(written)
    assert tasks.audit_checkpoint() is False  # no head moved since
    lane = named(written, "queue-102")
    tamper("DELETE FROM governance_auditentry WHERE chain = %s", lane)
    report = verify_chain()
    assert report.broken is not None and report.chain == lane
    assert "the audit key signed link 4" in report.broken
    tamper("DELETE FROM governance_auditchainhead WHERE chain = %s", lane)
    assert verify_chain().chain == lane


@pytest.mark.django_db
def test_a_missing_queue_head_is_found() -> None:
    lane = named(three_chains(), "queue-101")
    tamper("DELETE FROM governance_auditchainhead WHERE chain = %s", lane)
    report = verify_chain()
    assert report.broken == f"chain {lane}: the chain head is missing: it was deleted"


@pytest.mark.django_db
def test_a_checkpoint_signs_one_chain_and_cannot_vouch_for_another() -> None:
    written = three_chains()
    first, second = named(written, "queue-101"), named(written, "queue-102")
    tasks.audit_checkpoint()
    # queue 101's signature passed off as queue 102's (same link number, same hash)
    tamper("DELETE FROM governance_auditcheckpoint WHERE chain = %s", second)
    tamper("UPDATE governance_auditcheckpoint SET chain = %s WHERE chain = %s", second, first)
    report = verify_chain()
    assert report.broken is not None and "does not verify under audit key" in report.broken


@pytest.mark.django_db
def test_audit_verify_prints_and_holds_each_chains_head() -> None:
    written = three_chains(2)
    lane = named(written, "queue-101")
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert "audit chain intact: 6 entries in 3 chains" in out.getvalue()
    heads = [part.split()[0] for part in out.getvalue().split(" head ")[1:]]
    assert [h.split(":")[0] for h in heads] == sorted(written)
    queue_entries(101, 1)
    seal_now()
    call_command("audit_verify", *[f"--expect={h}" for h in heads], stdout=StringIO())
    tamper("DELETE FROM governance_auditentry WHERE chain = %s AND chain_seq > 1", lane)
    tamper(
        "UPDATE governance_auditchainhead h SET last_seq = 1, last_hash = e.hash "
        "FROM governance_auditentry e WHERE h.chain = %s AND e.chain = h.chain",
        lane,
    )
    assert verify_chain().broken is None  # nothing inside the database tells
    with pytest.raises(CommandError, match=rf"chain {re.escape(lane)}: .* recorded outside"):
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
        lane = lane_of(queue_entries(103, 2)[0])
        seal_now()
    assert AuditChainHead.objects.get(chain=lane).last_seq == 2
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


def _as_cycle() -> None:
    """Mark the transaction as its queue's cycle, as ``run_cycle`` does."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL governance.audit_lane = 'cycle'")


def _writer(team: Team, queue_id: int, holding: threading.Event, release: threading.Event) -> None:
    """As queue ``queue_id``'s cycle, write an entry and seal it now (the cycle chain's
    head locked until commit), say so and keep the transaction open until ``release``."""
    try:
        with transaction.atomic():
            _as_cycle()
            queue_entries(queue_id, 1, team=team)
            seal_now()
            holding.set()
            release.wait(timeout=60)
    finally:
        connections.close_all()


def _try_write(
    team: Team, queue_id: int, outcome: dict[str, Any], label: str, *, cycle: bool = False
) -> None:
    """Write and commit an entry on ``queue_id`` (as its cycle when ``cycle``), giving up
    on any lock it would wait for; its chain and link or the error, in ``outcome[label]``."""
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            if cycle:
                _as_cycle()
            entry = queue_entries(queue_id, 1, team=team)[0]
        entry = AuditEntry.objects.get(pk=entry.pk)
        outcome[label] = (entry.chain, entry.chain_seq)
    except OperationalError as exc:
        outcome[label] = exc
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_cycle_holding_its_queues_head_holds_neither_other_queues_nor_submissions() -> None:
    """While queue 101's cycle holds its chain's head (sealed, not committed: a big batch
    being sealed at commit), a writer on queue 102 and another writer on queue 101 (a
    submission, in a lane) both commit without waiting for it; a second cycle of queue
    101 would wait (the control: it gives up at its lock timeout). Every chain verifies
    afterwards."""
    team = Team.objects.create(name="holders")
    holding, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_writer, args=(team, 101, holding, release))
    holder.start()
    outcome: dict[str, Any] = {}
    try:
        assert holding.wait(timeout=60)
        for label, queue_id, cycle in (
            ("other queue", 102, False),
            ("submission", 101, False),
            ("cycle", 101, True),
        ):
            other = threading.Thread(
                target=_try_write, args=(team, queue_id, outcome, label), kwargs={"cycle": cycle}
            )
            other.start()
            other.join()
    finally:
        release.set()
        holder.join()
    # sealed and committed while queue 101's cycle chain was held
    assert re.fullmatch(r"queue-102\.[1-4]", outcome["other queue"][0])
    assert re.fullmatch(r"queue-101\.[1-4]", outcome["submission"][0])
    assert outcome["other queue"][1] == outcome["submission"][1] == 1
    assert isinstance(outcome["cycle"], OperationalError)
    assert "lock timeout" in str(outcome["cycle"])
    report = verify_chain()
    assert report.broken is None
    assert {s.chain: s.last_seq for s in report.chains if s.last_seq} == {
        "queue-101": 1,
        outcome["submission"][0]: 1,
        outcome["other queue"][0]: 1,
    }


@pytest.mark.django_db(transaction=True)
def test_one_queues_writers_spread_over_its_lanes() -> None:
    """Transactions writing to one queue take its lanes by transaction, so concurrent
    commits mostly hold different heads; every lane is a whole chain of its own."""
    team = Team.objects.create(name="lanes")
    for _ in range(24):
        queue_entries(101, 1, team=team)  # each its own transaction
    chains = dict(
        AuditEntry.objects.filter(queue_id=101)
        .values_list("chain")
        .annotate(n=models.Count("id"))
        .values_list("chain", "n")
    )
    assert set(chains) <= {f"queue-101.{lane}" for lane in range(1, 5)}
    assert len(chains) >= 2, chains
    report = verify_chain()
    assert report.broken is None
    assert {s.chain: s.last_seq for s in report.chains if s.last_seq} == chains


@pytest.mark.django_db
def test_a_queues_cycle_writes_its_chain_and_its_submissions_a_lane() -> None:
    """A submission joins one of its queue's lanes; the cycle that admits it writes the
    admission to the queue's cycle chain (the rest of its transaction likewise)."""
    w = make_world()
    job = jobs.job_submit(
        actor=w.red_member,
        share=w.red_share,
        name="lanes",
        preferences=[{"instance_type": "ml.g5.xlarge", "count": 1}],
    )
    run_cycle(w.queue.pk)
    seal_now()
    submitted, admitted = (
        AuditEntry.objects.get(event_type=event, job_id=job.pk)
        for event in (AuditEvent.JOB_SUBMITTED, AuditEvent.JOB_ADMITTED)
    )
    lane_of(submitted)
    assert admitted.chain == f"queue-{w.queue.pk}"
    assert verify_chain().broken is None


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
    assert {s.chain.partition(".")[0] for s in report.chains if s.last_seq} == {
        "site",
        "queue-100",
        "queue-101",
        "queue-102",
    }


# --- a transaction's many entries (migration 0038) ---------------------------------------


def head_place(chain: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT ctid::text FROM governance_auditchainhead WHERE chain = %s", [chain])
        return str(cursor.fetchone()[0])


def set_hint(value: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('governance.audit_head', %s, true)", [value])


@pytest.mark.django_db
def test_a_big_batch_interleaving_chains_is_sealed_link_by_link() -> None:
    """One transaction writing hundreds of entries to three chains in turn, sealed in two
    goes: every chain whole, every link in the order written."""
    team = Team.objects.create(name="batch")
    written: list[AuditEntry] = []
    for _ in range(2):
        for i in range(150):
            written += queue_entries(101 + i % 2, 1, team=team)
            if i % 5 == 0:
                written += write_entries(1)
        seal_now()
    # the last seal left where its chain's head is, for the next seal of that chain
    last = fresh(written[-1]).chain
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('governance.audit_head')")
        assert cursor.fetchone()[0] == f"{last}@{head_place(last)}"
    report = verify_chain()
    assert report.broken is None
    assert report.checked == len(written) == 2 * (150 + 30)
    by_chain: dict[str, list[int]] = {}
    for entry in written:
        by_chain.setdefault(fresh(entry).chain, []).append(fresh(entry).chain_seq or 0)
    assert {chain: seqs for chain, seqs in by_chain.items()} == {
        chain: list(range(1, len(seqs) + 1)) for chain, seqs in by_chain.items()
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "hint",
    ["another chain's head", "an old version", "malformed", "another chain's name"],
)
def test_the_writers_hint_of_where_the_head_is_moves_nothing_it_should_not(hint: str) -> None:
    """The seal reads a chain's head where the transaction's last seal left it
    (``governance.audit_head``); a writer may set that too, but a place that is not the
    chain's current head is ignored: no other head moves, every chain stays whole."""
    written = three_chains(2)
    first, second = named(written, "queue-101"), named(written, "queue-102")
    old_place = head_place(first)
    queue_entries(101, 1)
    seal_now()
    other_before = AuditChainHead.objects.get(chain=second)
    set_hint(
        {
            "another chain's head": f"{first}@{head_place(second)}",
            "an old version": f"{first}@{old_place}",
            "malformed": f"{first}@(1,2",
            "another chain's name": f"{second}@{head_place(first)}",
        }[hint]
    )
    entry = queue_entries(101, 1)[0]
    seal_now()
    assert fresh(entry).chain == first and fresh(entry).chain_seq == 4
    other = AuditChainHead.objects.get(chain=second)
    assert (other.last_seq, other.last_hash) == (other_before.last_seq, other_before.last_hash)
    assert AuditChainHead.objects.get(chain=first).last_seq == 4
    assert verify_chain().broken is None
