-- When the service's configuration was last deleted (milliseconds since the epoch; NULL: never).
-- The next version counts it as the change before it, so that `If-Modified-Since` with the
-- deleted version's date answers 200, not 304, when both fall in one second (docs/api.md,
-- "Public hosting").
ALTER TABLE services ADD COLUMN config_removed_at BIGINT;
-- When a deleted service's subdomain was freed: a service created again under it starts with
-- that time as its configuration's deletion (kept an hour, as the change log).
CREATE TABLE subdomain_removals (
    subdomain TEXT PRIMARY KEY NOT NULL,
    removed_at BIGINT NOT NULL
);
