ALTER TABLE published_configs DROP COLUMN jwks_changed_at;
ALTER TABLE published_configs DROP COLUMN discovery_changed_at;
