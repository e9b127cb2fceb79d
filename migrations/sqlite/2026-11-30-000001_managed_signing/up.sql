-- Managed signing (docs/api.md, "Managed signing"): one row per service that turned it on, its
-- settings and keys as JSON (each private key sealed under REGISTRY_DATA_KEY, never in clear),
-- and when its rotation step is next due (Unix milliseconds; NULL: nothing will happen by
-- itself). Written only inside the writers' lock, with the published key set it changes.
CREATE TABLE managed_signing (
    service_id TEXT NOT NULL PRIMARY KEY REFERENCES services(id) ON DELETE CASCADE,
    state TEXT NOT NULL,
    due_at BIGINT
);
CREATE INDEX managed_signing_due ON managed_signing (due_at);
