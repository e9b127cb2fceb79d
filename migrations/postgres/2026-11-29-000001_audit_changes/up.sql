-- What an update changed (docs/api.md, "Audit trail and last use"): a JSON object of the members
-- that changed, each with its old and new value (never a secret). NULL for the events of before,
-- and for events that are not updates.
ALTER TABLE audit_events ADD COLUMN changes TEXT;
