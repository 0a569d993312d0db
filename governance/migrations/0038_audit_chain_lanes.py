"""Lanes: the writers of a queue no longer all wait on one chain head, nor on its cycle.

Every commit that writes audit entries locks its chain's head and holds it through the
commit's WAL flush, so the commits of one queue's chain happen one at a time. Two things
follow on a busy queue (``bench/live.py`` at 200 submissions a second, 2 cores):

- each submission's commit waits for the one before it to reach the disk, so flushes
  that PostgreSQL could share between concurrent commits are made one by one;
- a cycle that admits many jobs seals all their entries at its commit (a fraction of a
  millisecond each) while every submission behind it waits. Under load the wait makes
  the next cycle's batch bigger and its commit longer: in about one run in three the
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

Nothing stored changes: existing entries keep their chains and links, a queue's chain
continues as its cycles' chain, and the lanes' heads are created by their first entries.
Backwards, entries go back to joining their queue's one chain; lanes already written stay
as they are (each still verifies on its own).
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

FORWARD = (
    _enlist(LANES)
    + """
-- The seal (migration 0037), its note of chains now also naming lanes.
CREATE OR REPLACE FUNCTION governance_audit_seal() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    head governance_auditchainhead%ROWTYPE;
    entry governance_auditentry%ROWTYPE;
    noted text := pg_catalog.current_setting('governance.audit_chains', true);
    name text;
BEGIN
    -- Several chains in this transaction: take every head it writes to by name first.
    -- (Only names the enlist trigger makes: the writer could set the note itself.)
    IF noted IS DISTINCT FROM NEW.chain THEN
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
    END IF;
    SELECT * INTO head FROM governance_auditchainhead WHERE chain = NEW.chain FOR UPDATE;
    IF NOT FOUND THEN  -- the chain's first entry
        INSERT INTO governance_auditchainhead (chain, last_seq, last_hash)
        VALUES (NEW.chain, 0, pg_catalog.repeat('0', 64)) ON CONFLICT (chain) DO NOTHING;
        SELECT * INTO head FROM governance_auditchainhead WHERE chain = NEW.chain FOR UPDATE;
    END IF;
    entry := NEW;
    entry.chain_seq := head.last_seq + 1;
    entry.prev_hash := head.last_hash;
    entry.hash := governance_audit_entry_hash(entry, head.last_hash);
    UPDATE governance_auditentry
       SET chain_seq = entry.chain_seq, prev_hash = entry.prev_hash, hash = entry.hash
     WHERE id = entry.id;
    UPDATE governance_auditchainhead
       SET last_seq = entry.chain_seq, last_hash = entry.hash
     WHERE chain = NEW.chain;
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
)

BACKWARD = _enlist("CASE WHEN NEW.queue_id IS NULL THEN 'site' ELSE 'queue-' || NEW.queue_id END")


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0037_audit_seal_fast_path"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
