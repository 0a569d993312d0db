"""Reads of the audit trail: reviewers and admins only."""

from __future__ import annotations

import hmac
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
class ChainReport:
    """What ``verify_chain`` found: ``broken`` is None when every link holds.
    ``signed_seq`` is the newest link a keyed checkpoint vouches for."""

    checked: int
    last_seq: int
    last_hash: str
    broken: str | None = None
    entry_id: int | None = None
    signed_seq: int = 0
    unchecked_checkpoints: int = 0


# Each entry's hash, recomputed by the same expression the seal trigger's function uses
# (migration 0010), written out here with every function named in pg_catalog: a function
# replaced inside the database cannot make a changed entry look intact.
_CHAIN_SQL = """
SELECT e.id, e.chain_seq, e.prev_hash, e.hash,
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
 ORDER BY e.chain_seq
"""


def _trusted_checkpoints() -> tuple[list[tuple[int, str]], int, str | None]:
    """The keyed checkpoints as (link, hash), oldest first, each checked against its key;
    how many were signed by a key declared lost (not checked); and the first problem."""
    keys = {audit_key_id(k): k for k in [settings.AUDIT_KEY, *settings.AUDIT_OLD_KEYS]}
    lost = set(settings.AUDIT_LOST_KEY_IDS)
    trusted: list[tuple[int, str]] = []
    unchecked = 0
    rows = AuditCheckpoint.objects.order_by("chain_seq").values_list(
        "chain_seq", "chain_hash", "key_id", "mac"
    )
    for chain_seq, chain_hash, key_id, mac in rows.iterator(chunk_size=5000):
        key = keys.get(key_id)
        if key is None:
            if key_id in lost:
                unchecked += 1
                continue
            return (
                trusted,
                unchecked,
                (
                    f"the checkpoint of link {chain_seq} is signed with audit key {key_id}, which "
                    "this installation does not hold (AUDIT_OLD_KEYS after a rotation; "
                    "AUDIT_LOST_KEY_IDS if it is lost)"
                ),
            )
        if not hmac.compare_digest(mac, checkpoint_mac(key, chain_seq, chain_hash)):
            return (
                trusted,
                unchecked,
                (
                    f"the checkpoint of link {chain_seq} does not verify under audit key {key_id}: "
                    "it was forged or changed inside the database"
                ),
            )
        trusted.append((chain_seq, chain_hash))
    return trusted, unchecked, None


def verify_chain(*, batch: int = 5000, expect: tuple[int, str] | None = None) -> ChainReport:
    """Walk the audit chain in order and report the first broken link.

    A link is broken when an entry's content no longer matches its hash (changed), when
    its ``prev_hash`` is not the previous entry's hash or its place skips one (an entry
    before it was removed or inserted), when an entry was never sealed (written around
    the trigger), when the chain no longer leads to a head signed with the audit key
    (entries changed and the chain re-sealed inside the database, or the newest entries
    removed), or when the chain head is missing or does not name the last entry found.
    ``expect`` is a link and hash recorded outside the database (an earlier head): the
    trail must still hold it, which no one can arrange from inside the database.
    """
    checked = 0
    seq = 0
    previous = GENESIS_HASH
    previous_id: int | None = None
    signed_seq = 0
    unchecked = 0

    def broken(message: str, entry_id: int | None) -> ChainReport:
        return ChainReport(checked, seq, previous, message, entry_id, signed_seq, unchecked)

    outermost = not connection.in_atomic_block
    with transaction.atomic(), connection.cursor() as cursor:
        if outermost:
            # One snapshot for the walk and the head, however many commits land meanwhile.
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        checkpoints, unchecked, problem = _trusted_checkpoints()
        if problem is not None:
            return broken(problem, None)
        pending = iter(checkpoints)
        signed = next(pending, None)
        cursor.execute(_CHAIN_SQL)
        while rows := cursor.fetchmany(batch):
            for entry_id, chain_seq, prev_hash, entry_hash, expected in rows:
                after = f"entry {previous_id}" if previous_id is not None else "the chain's start"
                if chain_seq != seq + 1:
                    return broken(
                        f"entry {entry_id} is link {chain_seq} but follows link {seq} "
                        f"({after}): links {seq + 1}..{chain_seq - 1} were removed",
                        entry_id,
                    )
                if prev_hash != previous:
                    return broken(
                        f"entry {entry_id} (link {chain_seq}) does not point at {after}: "
                        "that entry was changed or an entry between them removed",
                        entry_id,
                    )
                if entry_hash != expected:
                    return broken(
                        f"entry {entry_id} (link {chain_seq}) was changed after it was "
                        "written: its content does not match its hash",
                        entry_id,
                    )
                if expect is not None and expect[0] == chain_seq and expect[1] != entry_hash:
                    return broken(
                        f"entry {entry_id} (link {chain_seq}) is not the link recorded "
                        "outside the database: the trail up to it was rewritten",
                        entry_id,
                    )
                while signed is not None and signed[0] == chain_seq:
                    if entry_hash != signed[1]:
                        return broken(
                            f"entry {entry_id} (link {chain_seq}) is not the link the audit "
                            "key signed: the chain up to it was re-sealed inside the "
                            "database (entries changed, removed or inserted)",
                            entry_id,
                        )
                    signed_seq = chain_seq
                    signed = next(pending, None)
                checked += 1
                seq = chain_seq
                previous = entry_hash
                previous_id = entry_id
        if expect is not None and expect[0] > seq:
            return broken(
                f"link {expect[0]} was recorded outside the database but the trail ends at "
                f"link {seq}: the newest entries were removed",
                None,
            )
        if signed is not None:
            return broken(
                f"the audit key signed link {signed[0]} but the trail ends at link {seq}: "
                "the newest entries were removed",
                None,
            )
        cursor.execute(
            "SELECT id FROM governance_auditentry WHERE chain_seq IS NULL ORDER BY id LIMIT 1"
        )
        unsealed = cursor.fetchone()
        if unsealed is not None:
            return broken(
                f"entry {unsealed[0]} is not in the chain: it was written around the audit trigger",
                unsealed[0],
            )
        head = AuditChainHead.objects.filter(pk=1).first()
    if head is None:
        return broken("the chain head is missing: it was deleted", None)
    if head.last_seq < seq:
        return broken(
            f"the chain head is behind the trail: it names link {head.last_seq} but the trail "
            f"goes on to link {seq} (the head was moved back)",
            None,
        )
    if head.last_seq != seq or head.last_hash != previous:
        return broken(
            f"the chain head names link {head.last_seq} but the trail ends at link {seq}: "
            "the newest entries were removed or changed",
            None,
        )
    return ChainReport(checked, seq, previous, None, None, signed_seq, unchecked)


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
