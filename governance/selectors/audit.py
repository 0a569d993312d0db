"""Reads of the audit trail: reviewers and admins only."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import QuerySet

from governance import roles
from governance.models import AuditChainHead, AuditEntry, Job, JobQueue, Share, Team
from governance.models.audit import GENESIS_HASH
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
    """What ``verify_chain`` found: ``broken`` is None when every link holds."""

    checked: int
    last_seq: int
    last_hash: str
    broken: str | None = None
    entry_id: int | None = None


# The database recomputes each entry's hash with the same function its seal trigger uses
# (migration 0008), so the check and the writer cannot drift apart.
_CHAIN_SQL = """
SELECT e.id, e.chain_seq, e.prev_hash, e.hash,
       governance_audit_entry_hash(e, e.prev_hash) AS expected
  FROM governance_auditentry e
 WHERE e.chain_seq IS NOT NULL
 ORDER BY e.chain_seq
"""


def verify_chain(*, batch: int = 5000) -> ChainReport:
    """Walk the audit chain in order and report the first broken link.

    A link is broken when an entry's content no longer matches its hash (changed), when
    its ``prev_hash`` is not the previous entry's hash or its place skips one (an entry
    before it was removed or inserted), when an entry was never sealed (written around
    the trigger), or when the chain head names a later entry than the last one found
    (the newest entries were removed).
    """
    checked = 0
    seq = 0
    previous = GENESIS_HASH
    previous_id: int | None = None

    def broken(message: str, entry_id: int | None) -> ChainReport:
        return ChainReport(checked, seq, previous, message, entry_id)

    outermost = not connection.in_atomic_block
    with transaction.atomic(), connection.cursor() as cursor:
        if outermost:
            # One snapshot for the walk and the head, however many commits land meanwhile.
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
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
                checked += 1
                seq = chain_seq
                previous = entry_hash
                previous_id = entry_id
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
    if head is not None and (head.last_seq != seq or head.last_hash != previous):
        return broken(
            f"the chain head names link {head.last_seq} but the trail ends at link {seq}: "
            "the newest entries were removed or changed",
            None,
        )
    return ChainReport(checked, seq, previous)


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
