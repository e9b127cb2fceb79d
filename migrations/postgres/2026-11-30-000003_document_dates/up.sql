-- Fetch evidence (docs/api.md, "Fetch evidence"): when each public document last changed
-- (milliseconds since the epoch; NULL: at `updated_at`, as for rows written before). A key
-- rotation leaves the discovery document's date as it was, so a verifier that fetched it before
-- has still fetched it since it changed.
ALTER TABLE published_configs ADD COLUMN discovery_changed_at BIGINT;
ALTER TABLE published_configs ADD COLUMN jwks_changed_at BIGINT;
