DROP INDEX audit_events_by_id;
