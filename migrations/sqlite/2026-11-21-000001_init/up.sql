-- Identifiers are UUID text, times are unix milliseconds (BIGINT), JSON documents are text:
-- the same column types on SQLite and PostgreSQL, so one diesel schema serves both.

CREATE TABLE customers (
    id          TEXT PRIMARY KEY NOT NULL,
    name        TEXT NOT NULL,
    tenant      TEXT NOT NULL UNIQUE,
    plan        TEXT NOT NULL CHECK (plan IN ('free', 'team', 'business', 'enterprise')),
    created_at  BIGINT NOT NULL
);

-- customer_id is NULL for anonymous services, which are the only ones with an expiry.
CREATE TABLE services (
    id           TEXT PRIMARY KEY NOT NULL,
    customer_id  TEXT REFERENCES customers (id) ON DELETE CASCADE,
    subdomain    TEXT NOT NULL UNIQUE CHECK (subdomain = lower(subdomain)),
    title        TEXT,
    description  TEXT,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT
);
CREATE INDEX services_by_customer ON services (customer_id, created_at);
CREATE INDEX services_by_expiry ON services (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE service_accounts (
    id           TEXT PRIMARY KEY NOT NULL,
    customer_id  TEXT NOT NULL REFERENCES customers (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('static', 'oidc')),
    policy       TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);
CREATE INDEX service_accounts_by_customer ON service_accounts (customer_id, created_at);

-- The OIDC rules of every account, indexed by their exact `iss`.
CREATE TABLE account_issuers (
    issuer      TEXT NOT NULL,
    account_id  TEXT NOT NULL REFERENCES service_accounts (id) ON DELETE CASCADE,
    PRIMARY KEY (issuer, account_id)
);
CREATE INDEX account_issuers_by_account ON account_issuers (account_id);

-- Static tokens of accounts and secrets of anonymous services: exactly one owner each, at most
-- one credential per owner.
CREATE TABLE credentials (
    lookup_id   TEXT PRIMARY KEY NOT NULL,
    hash        TEXT NOT NULL,
    account_id  TEXT UNIQUE REFERENCES service_accounts (id) ON DELETE CASCADE,
    service_id  TEXT UNIQUE REFERENCES services (id) ON DELETE CASCADE,
    CHECK ((account_id IS NULL) <> (service_id IS NULL))
);

CREATE TABLE published_configs (
    service_id            TEXT PRIMARY KEY NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    openid_configuration  TEXT NOT NULL,
    jwks                  TEXT NOT NULL,
    updated_at            BIGINT NOT NULL
);

-- The change log replicas poll. AUTOINCREMENT: a sequence number is never reused, even after
-- the newest rows were deleted.
CREATE TABLE changes (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL CHECK (kind IN ('service', 'account')),
    subject_id  TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX changes_by_time ON changes (created_at);
