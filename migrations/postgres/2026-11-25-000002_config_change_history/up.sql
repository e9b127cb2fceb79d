-- Validators that hold within one second (docs/api.md, "Limits that hold"): the last change of a service's public
-- documents before the one its row describes (milliseconds since the epoch; NULL: none known).
-- When it falls in the same second as `updated_at`, a client's `If-Modified-Since` cannot tell
-- the two versions apart, and the registry answers 200 instead of 304.
ALTER TABLE published_configs ADD COLUMN previous_change_at BIGINT;
