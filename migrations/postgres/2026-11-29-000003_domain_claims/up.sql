-- Several customers may claim one domain while verifying; the name is held only once a TXT
-- record proves it (docs/api.md, "Custom domains"): unique among issuing and active domains, not
-- among claims. The challenges no longer reference the name, which is no longer unique.
ALTER TABLE acme_challenges DROP CONSTRAINT acme_challenges_domain_fkey;
ALTER TABLE custom_domains DROP CONSTRAINT custom_domains_domain_key;
CREATE INDEX custom_domains_by_domain ON custom_domains (domain);
CREATE UNIQUE INDEX custom_domains_held ON custom_domains (domain)
    WHERE status IN ('issuing', 'active');
