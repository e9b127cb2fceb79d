-- Several customers may claim one domain while verifying; the name is held only once a TXT
-- record proves it (docs/api.md, "Custom domains"): unique among issuing and active domains, not
-- among claims. The challenges no longer reference the name, which is no longer unique.
ALTER TABLE acme_challenges DROP CONSTRAINT acme_challenges_domain_fkey;
ALTER TABLE custom_domains DROP CONSTRAINT custom_domains_domain_key;
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
