-- Custom domains (docs/api.md, "Custom domains"): at most one per service, a name held by one
-- service; the certificate's private key is stored sealed under REGISTRY_DATA_KEY. `locked_until`
-- is the ordering lock: one replica orders for a domain at a time.
CREATE TABLE custom_domains (
    service_id TEXT NOT NULL PRIMARY KEY REFERENCES services(id) ON DELETE CASCADE,
    domain TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    txt_token TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    attempts INTEGER NOT NULL,
    error_code TEXT,
    error_message TEXT,
    certificate_chain TEXT,
    certificate_key TEXT,
    not_before BIGINT,
    not_after BIGINT,
    certificate_issuer TEXT,
    locked_until BIGINT
);
CREATE INDEX custom_domains_next_attempt ON custom_domains (next_attempt_at);
-- The answers of HTTP-01 challenges under way, which every replica serves.
CREATE TABLE acme_challenges (
    domain TEXT NOT NULL REFERENCES custom_domains(domain) ON DELETE CASCADE,
    token TEXT NOT NULL,
    key_authorization TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (domain, token)
);
-- The ACME account of each directory, its credentials sealed under REGISTRY_DATA_KEY.
CREATE TABLE acme_accounts (
    directory TEXT NOT NULL PRIMARY KEY,
    credentials TEXT NOT NULL
);
