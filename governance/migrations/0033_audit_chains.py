"""One audit chain per queue and one for the site, each with its own head.

Until now every audited write of the site took the one chain head's row lock at commit and
held it through the commit's flush, so all writes queued behind each other. Now an entry
joins the chain of its queue (``queue-<id>``) or, without a queue, the site chain
(``site``); a transaction locks only the heads of the chains it writes to. Verification
walks every chain and checks each against its head and its signed checkpoints
(docs/operations.md, "Audit trail").

- ``governance_auditentry.chain``: set by a BEFORE INSERT trigger from the entry's
  queue, whatever the writer sent, and never changed afterwards. The trigger also notes
  the chain in the transaction (``governance.audit_chains``, a transaction-local setting)
  so the seal, at commit, can lock every head the transaction needs in one order (by
  name): two transactions writing to the same two chains cannot deadlock.
- ``governance_auditchainhead``: one row per chain, named by ``chain`` (the key); created
  by the seal on a chain's first entry. Still written only by the seal, with its owner's
  rights; the product's role still only reads it.
- ``governance_auditcheckpoint.chain``: a checkpoint signs one chain's head.
- Existing entries keep their links and hashes: they form the first segment of the site
  chain (the entry hash is unchanged and does not cover the chain's name; an entry moved
  to another chain breaks both chains' links), the old head is the site chain's head and
  existing checkpoints sign the site chain (the site chain's MAC message is the old one).
  Nothing is re-sealed, so a trail verified before still verifies, entry for entry.

Not reversible: entries of several chains cannot be put back into one chain without
re-sealing them.
"""

from django.db import migrations, models

HEAD_TO_CHAIN_KEY = """
ALTER TABLE governance_auditchainhead ADD COLUMN chain varchar(40) NOT NULL DEFAULT 'site';
ALTER TABLE governance_auditchainhead ALTER COLUMN chain DROP DEFAULT;
ALTER TABLE governance_auditchainhead DROP CONSTRAINT governance_auditchainhead_pkey;
ALTER TABLE governance_auditchainhead DROP COLUMN id;
ALTER TABLE governance_auditchainhead ADD PRIMARY KEY (chain);
"""

FORWARD = """
-- The chain an entry joins, and a note of it for the seal: runs as the writer (a
-- transaction-local setting made inside a function with a SET clause would not outlive it).
CREATE OR REPLACE FUNCTION governance_audit_enlist() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    noted text := pg_catalog.current_setting('governance.audit_chains', true);
BEGIN
    NEW.chain := CASE WHEN NEW.queue_id IS NULL THEN 'site' ELSE 'queue-' || NEW.queue_id END;
    IF noted IS NULL OR noted = '' THEN
        PERFORM pg_catalog.set_config('governance.audit_chains', NEW.chain, true);
    ELSIF NOT (NEW.chain = ANY (pg_catalog.string_to_array(noted, ','))) THEN
        PERFORM pg_catalog.set_config('governance.audit_chains', noted || ',' || NEW.chain, true);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER governance_auditentry_enlist
BEFORE INSERT ON governance_auditentry
FOR EACH ROW EXECUTE FUNCTION governance_audit_enlist();

-- The seal (migration 0010), per chain. Each firing first takes every head the
-- transaction writes to, by name (its own locks are free to take again), creating a head
-- on its chain's first entry; then links its entry to its chain's head.
CREATE OR REPLACE FUNCTION governance_audit_seal() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    head governance_auditchainhead%ROWTYPE;
    entry governance_auditentry%ROWTYPE;
    name text;
BEGIN
    -- (Only names the enlist trigger makes: the writer could set the note itself.)
    FOR name IN
        SELECT c FROM pg_catalog.unnest(pg_catalog.string_to_array(
            pg_catalog.current_setting('governance.audit_chains', true), ',')) AS c
         WHERE c OPERATOR(pg_catalog.~) '^(site|queue-[0-9]{1,19})$'
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
    SELECT * INTO head FROM governance_auditchainhead WHERE chain = NEW.chain;
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


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0032_merged_choices"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="chain",
            field=models.CharField(default="site", editable=False, max_length=40),
        ),
        migrations.AddField(
            model_name="auditcheckpoint",
            name="chain",
            field=models.CharField(default="site", max_length=40),
        ),
        migrations.AlterField(
            model_name="auditcheckpoint",
            name="chain_seq",
            field=models.BigIntegerField(),
        ),
        migrations.AddConstraint(
            model_name="auditcheckpoint",
            constraint=models.UniqueConstraint(
                fields=("chain", "chain_seq"), name="audit_checkpoint_chain_link"
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(HEAD_TO_CHAIN_KEY)],
            state_operations=[
                migrations.DeleteModel(name="AuditChainHead"),
                migrations.CreateModel(
                    name="AuditChainHead",
                    fields=[
                        (
                            "chain",
                            models.CharField(
                                default="site", max_length=40, primary_key=True, serialize=False
                            ),
                        ),
                        ("last_seq", models.BigIntegerField(default=0)),
                        (
                            "last_hash",
                            models.CharField(
                                default="0000000000000000000000000000000000000000000000000000000000000000",
                                max_length=64,
                            ),
                        ),
                    ],
                ),
            ],
        ),
        migrations.RunSQL(FORWARD),
    ]
