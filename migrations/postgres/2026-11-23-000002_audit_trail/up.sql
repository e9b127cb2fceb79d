-- The audit trail (docs/api.md, "Audit trail and last use"): one row per change, written in the change's transaction.
-- `seq` orders events as their transactions committed (writers are serialized), which is what
-- keeps pages stable while events are written. `customer_id` is NULL for anonymous services.
CREATE TABLE audit_events (
    seq               BIGSERIAL PRIMARY KEY,
    id                TEXT NOT NULL,
    customer_id       TEXT,
    at                BIGINT NOT NULL,
    action            TEXT NOT NULL,
    resource_type     TEXT NOT NULL,
    resource_id       TEXT NOT NULL,
    subdomain         TEXT,
    actor_kind        TEXT NOT NULL,
    actor_account_id  TEXT,
    actor_iss         TEXT,
    actor_sub         TEXT,
    ip                TEXT,
    request_id        TEXT
);
-- No index on `at`: retention deletes from the oldest `seq` up (events are written in time
-- order), and `since` filters within one customer's pages; each index is one more page for
-- every change to write.
CREATE INDEX audit_events_by_customer ON audit_events (customer_id, seq);

-- The minute of an account's last successful request, written at most once a minute.
ALTER TABLE service_accounts ADD COLUMN last_used_at BIGINT;

-- The earliest end of a retired key in key_state, so that the reaper finds the keys whose time
-- ran out (key.expire) without reading every configuration. Written with every configuration;
-- those written before this column get it at their next upload (until then their retired keys
-- still leave the public key set on time, without a key.expire event).
ALTER TABLE published_configs ADD COLUMN key_expires_at BIGINT;
CREATE INDEX published_configs_by_key_expiry ON published_configs (key_expires_at);

-- Federated requests refused after their signature verified (docs/api.md, "Explaining refusals"), for the owner of
-- the accounts that trust the token's issuer: the latest 100 per account, 7 days.
CREATE TABLE refusals (
    seq         BIGSERIAL PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES service_accounts (id) ON DELETE CASCADE,
    at          BIGINT NOT NULL,
    refusal     TEXT NOT NULL
);
CREATE INDEX refusals_by_account ON refusals (account_id, seq);
