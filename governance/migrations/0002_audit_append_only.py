"""Make the audit trail append-only in the database itself, not only in the ORM."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION governance_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit entries are append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER governance_auditentry_append_only
BEFORE UPDATE OR DELETE ON governance_auditentry
FOR EACH ROW EXECUTE FUNCTION governance_audit_append_only();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS governance_auditentry_append_only ON governance_auditentry;
DROP FUNCTION IF EXISTS governance_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("governance", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
