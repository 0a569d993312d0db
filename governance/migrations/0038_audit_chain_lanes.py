"""Lanes: the writers of a queue no longer all wait on one chain head, nor on its cycle;
and the seal of a transaction's many entries costs the same per entry, however many.

Every commit that writes audit entries locks its chain's head and holds it through the
commit's WAL flush, so the commits of one queue's chain happen one at a time. Two things
follow on a busy queue (``bench/live.py`` at 200 submissions a second, 2 cores):

- each submission's commit waits for the one before it to reach the disk, so flushes
  that PostgreSQL could share between concurrent commits are made one by one;
- a cycle that admits many jobs seals all their entries at its commit (a fraction of a
  millisecond each) while every submission behind it waits. Under load the wait makes
  the next cycle's batch bigger and its commit longer: in about one run in five the
  queue fell into that state and stayed there (PostgreSQL's statements 25 to 35 ms of
  wall time per submission instead of 3 to 4, submit-to-admitted p95 220 to 930 ms).

So a queue now has five chains, each a complete hash chain with its own head:

- ``queue-<id>``, the chain of before, now written by the queue's scheduling cycles only
  (the cycle marks its transaction, ``governance.audit_lane = 'cycle'``);
- ``queue-<id>.1`` to ``queue-<id>.4``, the lanes of every other writer of the queue
  (submissions, agents' reports, administrators' changes), one lane per transaction,
  chosen by its transaction id, so concurrent commits mostly hold different heads.

The site chain is unchanged. Which chain of its queue an entry joins proves nothing and
the writer may choose it (it may set the lane to ``cycle``); that it stays in the chain it
was sealed in is what the hashes prove, as before. A transaction's entries of one queue
all join the same chain, so the seal's one-chain fast path (migration 0037) still
applies; a transaction writing to several chains takes their heads by name, as before.

Each seal updates its chain's head, and inside one transaction every update leaves a new
version of that one row that nothing can prune before the commit. The seal found its
head by name: through the key's index, past every version the transaction had made so
far, so the n-th entry's seal walked n versions. Sealing a batch of n entries took time
in n squared: 100 entries 7.7 ms, 1,600 entries 107 ms, 6,400 entries 0.88 s, 12,800
entries 3.1 s (one INSERT of n entries and its commit, PostgreSQL 15, 2 cores). A cycle
seals every admission, preemption and completion it decides at its commit, so a queue
that fell behind made bigger batches that took longer to seal, and fell further behind.

Now each seal after a transaction's first of a chain leaves the place of the head's new
version in the transaction (``governance.audit_head``: chain and ``ctid``) and the next
seal of the same chain reads the head there, directly, locked as before. (The first seal
of a chain does not: most transactions write one entry, and the setting cost them about
4% of their rate in pgbench; the second seal, finding the head already moved by its own
transaction, starts keeping it.) The place is only a hint: the row read there must be
the chain's head and visible (its current version), or the seal looks the head up by
name as before, so a writer who sets the hint itself gains nothing. The heads of a
transaction writing to several chains are taken by name once, at its first seal
(``governance.audit_locked`` notes for which chains), not again at every seal.

Nothing stored changes and the chain, the links and the hashes are computed as before:
existing entries keep their chains and links, a queue's chain continues as its cycles'
chain, and the lanes' heads are created by their first entries. Backwards, entries go
back to joining their queue's one chain (the seal stays: it links entries as the one
before did); lanes already written stay as they are (each still verifies on its own).
"""

from django.db import migrations


def _enlist(chain: str) -> str:
    """The insert trigger's function (migration 0033), joining entries to ``chain``."""
    return f"""
CREATE OR REPLACE FUNCTION governance_audit_enlist() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    noted text := pg_catalog.current_setting('governance.audit_chains', true);
BEGIN
    NEW.chain := {chain};
    IF noted IS NULL OR noted = '' THEN
        PERFORM pg_catalog.set_config('governance.audit_chains', NEW.chain, true);
    ELSIF NOT (NEW.chain = ANY (pg_catalog.string_to_array(noted, ','))) THEN
        PERFORM pg_catalog.set_config('governance.audit_chains', noted || ',' || NEW.chain, true);
    END IF;
    RETURN NEW;
END;
$$;
"""


# The site's chain without a queue; with one, its cycles' chain when the transaction says
# it is the queue's cycle, else one of the queue's four lanes, by transaction (every entry
# of a transaction in the same lane).
LANES = """CASE
        WHEN NEW.queue_id IS NULL THEN 'site'
        WHEN pg_catalog.current_setting('governance.audit_lane', true) = 'cycle'
            THEN 'queue-' || NEW.queue_id
        ELSE 'queue-' || NEW.queue_id || '.' || (1 + pg_catalog.txid_current() % 4)
    END"""

SEAL = """
-- The seal (migrations 0010, 0033, 0037), for lanes and batches.
CREATE OR REPLACE FUNCTION governance_audit_seal() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    entry governance_auditentry%ROWTYPE;
    noted text := pg_catalog.current_setting('governance.audit_chains', true);
    hint text := pg_catalog.current_setting('governance.audit_head', true);
    place tid;
    moved boolean := true;
    at_seq bigint;
    at_hash text;
    name text;
BEGIN
    -- This transaction's last seal of this chain left where the head now is: read it
    -- there (only if it is this chain's head and its current version; locked already).
    IF hint OPERATOR(pg_catalog.~) '^[^@]+@\\([0-9]{1,10},[0-9]{1,5}\\)$'
       AND pg_catalog.split_part(hint, '@', 1) = NEW.chain THEN
        SELECT h.ctid, h.last_seq, h.last_hash INTO place, at_seq, at_hash
          FROM governance_auditchainhead h
         WHERE h.ctid = pg_catalog.split_part(hint, '@', 2)::tid AND h.chain = NEW.chain
           FOR UPDATE;
    END IF;
    IF place IS NULL THEN
        -- Several chains in this transaction: take every head it writes to by name
        -- first, once. (Only names the enlist trigger makes: the writer could set the
        -- note itself.)
        IF noted IS DISTINCT FROM NEW.chain
           AND noted IS DISTINCT FROM pg_catalog.current_setting('governance.audit_locked', true)
        THEN
            FOR name IN
                SELECT c FROM pg_catalog.unnest(pg_catalog.string_to_array(noted, ',')) AS c
                 WHERE c OPERATOR(pg_catalog.~) '^(site|queue-[0-9]{1,19}([.][1-4])?)$'
                UNION SELECT NEW.chain
                ORDER BY 1
            LOOP
                PERFORM 1 FROM governance_auditchainhead WHERE chain = name FOR UPDATE;
                IF NOT FOUND THEN
                    INSERT INTO governance_auditchainhead (chain, last_seq, last_hash)
                    VALUES (name, 0, pg_catalog.repeat('0', 64)) ON CONFLICT (chain) DO NOTHING;
                    PERFORM 1 FROM governance_auditchainhead WHERE chain = name FOR UPDATE;
                END IF;
            END LOOP;
            PERFORM pg_catalog.set_config('governance.audit_locked', noted, true);
        END IF;
        SELECT h.ctid, h.last_seq, h.last_hash,
               h.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(pg_catalog.pg_current_xact_id())
          INTO place, at_seq, at_hash, moved
          FROM governance_auditchainhead h WHERE h.chain = NEW.chain FOR UPDATE;
        IF NOT FOUND THEN  -- the chain's first entry
            INSERT INTO governance_auditchainhead (chain, last_seq, last_hash)
            VALUES (NEW.chain, 0, pg_catalog.repeat('0', 64)) ON CONFLICT (chain) DO NOTHING;
            SELECT h.ctid, h.last_seq, h.last_hash INTO place, at_seq, at_hash
              FROM governance_auditchainhead h WHERE h.chain = NEW.chain FOR UPDATE;
        END IF;
    END IF;
    entry := NEW;
    entry.chain_seq := at_seq + 1;
    entry.prev_hash := at_hash;
    entry.hash := governance_audit_entry_hash(entry, at_hash);
    UPDATE governance_auditentry
       SET chain_seq = entry.chain_seq, prev_hash = entry.prev_hash, hash = entry.hash
     WHERE id = entry.id;
    UPDATE governance_auditchainhead
       SET last_seq = entry.chain_seq, last_hash = entry.hash
     WHERE ctid = place
    RETURNING ctid INTO place;
    IF moved THEN  -- not the transaction's first seal of this chain: a batch, keep its place
        PERFORM pg_catalog.set_config(
            'governance.audit_head', NEW.chain || '@' || place::text, true);
    END IF;
    RETURN NULL;
END;
$$;

DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION governance_audit_seal() SET search_path = %I, pg_catalog, pg_temp',
        current_schema()
    );
END;
$$;
"""


FORWARD = _enlist(LANES) + SEAL

BACKWARD = _enlist("CASE WHEN NEW.queue_id IS NULL THEN 'site' ELSE 'queue-' || NEW.queue_id END")


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0037_audit_seal_fast_path"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
