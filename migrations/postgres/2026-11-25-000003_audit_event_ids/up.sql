-- Audit pages resume after the event their cursor names, by its id (docs/api.md, "Limits that hold": a cursor
-- must not carry `seq`, which counts every customer's events). The lookup is by id alone, so
-- each change writes one more index entry.
CREATE INDEX audit_events_by_id ON audit_events (id);
