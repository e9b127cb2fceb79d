-- Several customers may claim one domain while verifying; the name is held only once a TXT
-- record proves it (docs/api.md, "Custom domains"): unique among issuing and active domains, not
-- among claims. SQLite cannot drop a constraint: both tables are made again without it (and the
-- challenges without their reference to the name, which is no longer unique).
CREATE TABLE acme_challenges_new (
    domain TEXT NOT NULL,
    token TEXT NOT NULL,
    key_authorization TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (domain, token)
);
INSERT INTO acme_challenges_new SELECT domain, token, key_authorization, created_at FROM acme_challenges;
DROP TABLE acme_challenges;
CREATE TABLE custom_domains_new (
    service_id TEXT NOT NULL PRIMARY KEY REFERENCES services(id) ON DELETE CASCADE,
    domain TEXT NOT NULL,
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
INSERT INTO custom_domains_new SELECT service_id, domain, status, txt_token, created_at,
    next_attempt_at, attempts, error_code, error_message, certificate_chain, certificate_key,
    not_before, not_after, certificate_issuer, locked_until FROM custom_domains;
DROP TABLE custom_domains;
ALTER TABLE custom_domains_new RENAME TO custom_domains;
ALTER TABLE acme_challenges_new RENAME TO acme_challenges;
CREATE INDEX custom_domains_next_attempt ON custom_domains (next_attempt_at);
CREATE INDEX custom_domains_by_domain ON custom_domains (domain);
CREATE UNIQUE INDEX custom_domains_held ON custom_domains (domain)
    WHERE status IN ('issuing', 'active');
-- The ACME orders placed, by directory (one account each): new orders are budgeted per customer
-- (3 an hour) and every order per account (250 in 3 hours), whichever replica places it. Kept
-- 3 hours.
CREATE TABLE acme_orders (
    directory TEXT NOT NULL,
    domain TEXT NOT NULL,
    at BIGINT NOT NULL,
    customer_id TEXT,
    renewal BOOLEAN NOT NULL,
    PRIMARY KEY (directory, domain, at)
);
CREATE INDEX acme_orders_by_time ON acme_orders (directory, at);
