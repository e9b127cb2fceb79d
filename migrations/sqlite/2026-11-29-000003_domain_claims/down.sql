DROP TABLE acme_orders;
DROP INDEX custom_domains_held;
DROP INDEX custom_domains_by_domain;
CREATE UNIQUE INDEX custom_domains_domain_unique ON custom_domains (domain);
