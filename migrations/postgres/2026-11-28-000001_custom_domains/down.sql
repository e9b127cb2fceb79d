DROP TABLE acme_accounts;
DROP TABLE acme_challenges;
DROP TABLE custom_domains;
