ALTER TABLE audit_events DROP COLUMN changes;
