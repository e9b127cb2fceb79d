-- Key readiness (docs/api.md, "Key readiness"): when each key was first found safe to sign with;
-- once safe, a key stays safe. Kept as long as the fetch evidence it was derived from.
CREATE TABLE key_readiness (
    service_id TEXT NOT NULL,
    kid TEXT NOT NULL,
    safe_at BIGINT NOT NULL,
    PRIMARY KEY (service_id, kid)
);
