-- Key readiness (docs/api.md, "Key readiness"): when each key was first found safe to sign with;
-- once safe, a key stays safe. Kept as long as the fetch evidence it was derived from.
CREATE TABLE key_readiness (
    service_id TEXT NOT NULL,
    kid TEXT NOT NULL,
    safe_at BIGINT NOT NULL,
    PRIMARY KEY (service_id, kid)
);
-- Purges of the caches in front of the registry (docs/api.md, "Behind a CDN"): per service, the
-- newest change of its documents that every cache was told to drop.
CREATE TABLE purges (
    service_id TEXT NOT NULL PRIMARY KEY,
    changed_at BIGINT NOT NULL
);
