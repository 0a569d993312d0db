"""Reads of the audit trail: reviewers and admins only."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import QuerySet

from governance import roles
from governance.models import (
    AuditChainHead,
    AuditCheckpoint,
    AuditEntry,
    Job,
    JobQueue,
    Share,
    Team,
)
from governance.models.audit import GENESIS_HASH, audit_key_id, checkpoint_mac
from governance.roles import AnyUser
from governance.services.errors import PermissionDenied


def may_read_audit(user: AnyUser) -> bool:
    return roles.is_admin(user) or roles.is_reviewer(user)


def audit_entries(user: AnyUser) -> QuerySet[AuditEntry]:
    """The whole trail, newest first (keyset-friendly: created_at, then id), with actors.

    Raises PermissionDenied for anyone but reviewers and admins: the trail shows every
    team's justifications and decisions.
    """
    if not may_read_audit(user):
        raise PermissionDenied({"detail": ["Only reviewers and admins may read the audit trail."]})
    return AuditEntry.objects.select_related("actor").order_by("-created_at", "-id")


@dataclass(frozen=True)
class ChainState:
    """One chain as ``verify_chain`` found it: its newest link and hash, and the newest
    link a keyed checkpoint vouches for."""

    chain: str
    last_seq: int
    last_hash: str
    signed_seq: int = 0


@dataclass(frozen=True)
class ChainReport:
    """What ``verify_chain`` found: ``broken`` is None when every link of every chain
    holds; ``chains`` are the chains checked (all of them when none is broken), by name;
    ``chain`` names the broken one."""

    checked: int
    chains: tuple[ChainState, ...] = ()
    broken: str | None = None
    entry_id: int | None = None
    unchecked_checkpoints: int = 0
    chain: str | None = None


# Each entry's hash, recomputed by the same expression the seal trigger's function uses
# (migration 0010), written out here with every function named in pg_catalog: a function
# replaced inside the database cannot make a changed entry look intact. Chain by chain
# (migration 0033), each in link order.
_CHAIN_SQL = """
SELECT e.chain, e.id, e.chain_seq, e.prev_hash, e.hash,
       pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
           e.prev_hash || pg_catalog.jsonb_build_array(
               e.id, e.chain_seq, e.event_type, e.actor_id, e.subject_type, e.subject_id,
               e.subject_repr, e.team_id, e.share_id, e.job_id, e.queue_id, e.before,
               e.after, e.reason,
               pg_catalog.to_char(e.created_at AT TIME ZONE 'UTC',
                                  'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
           )::text, 'UTF8')), 'hex') AS expected
  FROM governance_auditentry e
 WHERE e.chain_seq IS NOT NULL
 ORDER BY e.chain, e.chain_seq
"""

Signatures = dict[str, list[tuple[int, str]]]


def _trusted_checkpoints() -> tuple[Signatures, int, str | None]:
    """The keyed checkpoints as chain -> [(link, hash)], oldest first, each checked against
    its key; how many were signed by a key declared lost (not checked); the first problem."""
    keys = {audit_key_id(k): k for k in [settings.AUDIT_KEY, *settings.AUDIT_OLD_KEYS]}
    lost = set(settings.AUDIT_LOST_KEY_IDS)
    trusted: Signatures = {}
    unchecked = 0
    rows = AuditCheckpoint.objects.order_by("chain", "chain_seq").values_list(
        "chain", "chain_seq", "chain_hash", "key_id", "mac"
    )
    for chain, chain_seq, chain_hash, key_id, mac in rows.iterator(chunk_size=5000):
        key = keys.get(key_id)
        if key is None:
            if key_id in lost:
                unchecked += 1
                continue
            return (
                trusted,
                unchecked,
                (
                    f"the checkpoint of link {chain_seq} of chain {chain} is signed with audit "
                    f"key {key_id}, which this installation does not hold (AUDIT_OLD_KEYS "
                    "after a rotation; AUDIT_LOST_KEY_IDS if it is lost)"
                ),
            )
        if not hmac.compare_digest(mac, checkpoint_mac(key, chain_seq, chain_hash, chain)):
            return (
                trusted,
                unchecked,
                (
                    f"the checkpoint of link {chain_seq} of chain {chain} does not verify under "
                    f"audit key {key_id}: it was forged or changed inside the database"
                ),
            )
        trusted.setdefault(chain, []).append((chain_seq, chain_hash))
    return trusted, unchecked, None


class _Broken(Exception):
    """A broken link: the message and the entry it was found at."""

    def __init__(self, message: str, entry_id: int | None = None) -> None:
        super().__init__(message)
        self.entry_id = entry_id


class _ChainWalk:
    """One chain walked link by link: each entry checked against the one before it, the
    checkpoints signed for the chain and a link recorded outside the database."""

    def __init__(
        self, chain: str, signatures: list[tuple[int, str]], expect: tuple[int, str] | None
    ) -> None:
        self.chain = chain
        self.seq = 0
        self.previous = GENESIS_HASH
        self.previous_id: int | None = None
        self.signed_seq = 0
        self.checked = 0
        self.expect = expect
        self._pending = iter(signatures)
        self._signed = next(self._pending, None)

    def step(
        self, entry_id: int, chain_seq: int, prev_hash: str, entry_hash: str, expected: str
    ) -> None:
        name = f"chain {self.chain}"
        after = f"entry {self.previous_id}" if self.previous_id is not None else "the chain's start"
        if chain_seq != self.seq + 1:
            raise _Broken(
                f"{name}: entry {entry_id} is link {chain_seq} but follows link {self.seq} "
                f"({after}): links {self.seq + 1}..{chain_seq - 1} were removed",
                entry_id,
            )
        if prev_hash != self.previous:
            raise _Broken(
                f"{name}: entry {entry_id} (link {chain_seq}) does not point at {after}: "
                "that entry was changed or an entry between them removed",
                entry_id,
            )
        if entry_hash != expected:
            raise _Broken(
                f"{name}: entry {entry_id} (link {chain_seq}) was changed after it was "
                "written: its content does not match its hash",
                entry_id,
            )
        if self.expect is not None and self.expect[0] == chain_seq and self.expect[1] != entry_hash:
            raise _Broken(
                f"{name}: entry {entry_id} (link {chain_seq}) is not the link recorded "
                "outside the database: the trail up to it was rewritten",
                entry_id,
            )
        while self._signed is not None and self._signed[0] == chain_seq:
            if entry_hash != self._signed[1]:
                raise _Broken(
                    f"{name}: entry {entry_id} (link {chain_seq}) is not the link the audit "
                    "key signed: the chain up to it was re-sealed inside the database "
                    "(entries changed, removed or inserted)",
                    entry_id,
                )
            self.signed_seq = chain_seq
            self._signed = next(self._pending, None)
        self.checked += 1
        self.seq = chain_seq
        self.previous = entry_hash
        self.previous_id = entry_id

    def end(self) -> None:
        """The chain's end: no signed or recorded link beyond it (checked before the head)."""
        name = f"chain {self.chain}"
        if self.expect is not None and self.expect[0] > self.seq:
            raise _Broken(
                f"{name}: link {self.expect[0]} was recorded outside the database but the "
                f"trail ends at link {self.seq}: the newest entries were removed"
            )
        if self._signed is not None:
            raise _Broken(
                f"{name}: the audit key signed link {self._signed[0]} but the trail ends at "
                f"link {self.seq}: the newest entries were removed"
            )

    def check_head(self, head: AuditChainHead | None) -> ChainState:
        name = f"chain {self.chain}"
        if head is None:
            raise _Broken(f"{name}: the chain head is missing: it was deleted")
        if head.last_seq < self.seq:
            raise _Broken(
                f"{name}: the chain head is behind the trail: it names link {head.last_seq} "
                f"but the trail goes on to link {self.seq} (the head was moved back)"
            )
        if head.last_seq != self.seq or head.last_hash != self.previous:
            raise _Broken(
                f"{name}: the chain head names link {head.last_seq} but the trail ends at "
                f"link {self.seq}: the newest entries were removed or changed"
            )
        return ChainState(self.chain, self.seq, self.previous, self.signed_seq)


def verify_chain(
    *, batch: int = 5000, expect: Mapping[str, tuple[int, str]] | None = None
) -> ChainReport:
    """Walk every audit chain (one per queue and the site's, docs/operations.md "Audit
    trail") in order and report the first broken link.

    A link is broken when an entry's content no longer matches its hash (changed), when
    its ``prev_hash`` is not the previous entry's hash or its place skips one (an entry
    before it was removed, inserted, or moved from another chain), when an entry was never
    sealed (written around the trigger), when a chain no longer leads to a head signed
    with the audit key (entries changed and the chain re-sealed inside the database, or
    the newest entries removed, a whole chain included), or when a chain's head is missing
    or does not name its last entry. ``expect`` maps a chain to a link and hash recorded
    outside the database (an earlier head): the trail must still hold it, which no one
    can arrange from inside the database.
    """
    expected_links = dict(expect or {})
    walks: list[_ChainWalk] = []
    unchecked = 0

    def report(problem: str, entry_id: int | None = None, chain: str | None = None) -> ChainReport:
        states = tuple(ChainState(w.chain, w.seq, w.previous, w.signed_seq) for w in walks)
        checked = sum(w.checked for w in walks)
        return ChainReport(checked, states, problem, entry_id, unchecked, chain)

    outermost = not connection.in_atomic_block
    with transaction.atomic(), connection.cursor() as cursor:
        if outermost:
            # One snapshot for the walk and the heads, however many commits land meanwhile.
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        signatures, unchecked, problem = _trusted_checkpoints()
        if problem is not None:
            return report(problem)
        heads = {head.chain: head for head in AuditChainHead.objects.all()}
        states: list[ChainState] = []

        def start(chain: str) -> _ChainWalk:
            walk = _ChainWalk(chain, signatures.pop(chain, []), expected_links.pop(chain, None))
            walks.append(walk)
            return walk

        def finish(walk: _ChainWalk) -> None:
            walk.end()
            states.append(walk.check_head(heads.pop(walk.chain, None)))

        try:
            walk: _ChainWalk | None = None
            cursor.execute(_CHAIN_SQL)
            while rows := cursor.fetchmany(batch):
                for chain, entry_id, chain_seq, prev_hash, entry_hash, expected in rows:
                    if walk is None or walk.chain != chain:
                        if walk is not None:
                            finish(walk)
                        walk = start(chain)
                    walk.step(entry_id, chain_seq, prev_hash, entry_hash, expected)
            if walk is not None:
                finish(walk)
            # Chains with a head, a signature or a recorded link but no entry left.
            for chain in sorted({*heads, *signatures, *expected_links}):
                finish(start(chain))
        except _Broken as found:
            # The chain being walked (the last one started) is the broken one.
            return report(str(found), found.entry_id, walks[-1].chain if walks else None)
        cursor.execute(
            "SELECT id, chain FROM governance_auditentry WHERE chain_seq IS NULL "
            "ORDER BY id LIMIT 1"
        )
        unsealed = cursor.fetchone()
        if unsealed is not None:
            return report(
                f"entry {unsealed[0]} is not in the chain: it was written around the audit trigger",
                unsealed[0],
                unsealed[1],
            )
    return ChainReport(sum(w.checked for w in walks), tuple(states), None, None, unchecked)


def subject_names() -> dict[str, dict[int, str]]:
    """Every team, share and queue id -> its name now (for the CSV export)."""
    return {
        "team": dict(Team.objects.values_list("pk", "name")),
        "share": dict(Share.objects.values_list("pk", "name")),
        "queue": dict(JobQueue.objects.values_list("pk", "name")),
    }


# What an id in an audit entry's before/after or subject columns names, by its kind.
_NAMED = {
    "user": lambda: get_user_model().objects,
    "team": lambda: Team.objects,
    "share": lambda: Share.objects,
    "queue": lambda: JobQueue.objects,
    "job": lambda: Job.objects,
}


def names_of(refs: dict[str, set[int]]) -> dict[tuple[str, int], str]:
    """``{kind: ids}`` -> ``{(kind, id): name}`` as named now, one query per kind given
    (users by user name); ids of rows gone since are absent."""
    out: dict[tuple[str, int], str] = {}
    for kind, ids in refs.items():
        if kind not in _NAMED or not ids:
            continue
        field = "username" if kind == "user" else "name"
        for pk, name in _NAMED[kind]().filter(pk__in=ids).values_list("pk", field):
            out[(kind, pk)] = str(name)
    return out
