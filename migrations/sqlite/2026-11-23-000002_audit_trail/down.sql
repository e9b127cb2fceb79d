DROP TABLE refusals;
DROP INDEX published_configs_by_key_expiry;
ALTER TABLE published_configs DROP COLUMN key_expires_at;
ALTER TABLE service_accounts DROP COLUMN last_used_at;
DROP TABLE audit_events;
