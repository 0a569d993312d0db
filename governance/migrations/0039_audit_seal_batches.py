"""The seal of a transaction's many entries costs the same per entry, however many.

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

The chain, the links and the hashes are exactly as before. Backwards this migration does
nothing: this seal links entries exactly as migration 0038's does, so going back keeps it.
"""

from django.db import migrations

_SEARCH_PATH = """
DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION governance_audit_seal() SET search_path = %I, pg_catalog, pg_temp',
        current_schema()
    );
END;
$$;
"""

FORWARD = (
    """
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
        PERFORM pg_catalog.set_config('governance.audit_head', NEW.chain || '@' || place::text, true);
    END IF;
    RETURN NULL;
END;
$$;
"""
    + _SEARCH_PATH
)


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0038_audit_chain_lanes"),
    ]

    operations = [migrations.RunSQL(FORWARD, migrations.RunSQL.noop)]
