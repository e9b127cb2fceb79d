DROP TABLE acme_orders;
DROP INDEX custom_domains_held;
DROP INDEX custom_domains_by_domain;
ALTER TABLE custom_domains ADD CONSTRAINT custom_domains_domain_key UNIQUE (domain);
ALTER TABLE acme_challenges ADD CONSTRAINT acme_challenges_domain_fkey
    FOREIGN KEY (domain) REFERENCES custom_domains(domain) ON DELETE CASCADE;
