-- When the service's configuration was last deleted (milliseconds since the epoch; NULL: never).
-- The next version counts it as the change before it, so that `If-Modified-Since` with the
-- deleted version's date answers 200, not 304, when both fall in one second (docs/api.md,
-- "Public hosting").
ALTER TABLE services ADD COLUMN config_removed_at BIGINT;
