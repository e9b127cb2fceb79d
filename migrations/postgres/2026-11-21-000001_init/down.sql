DROP TABLE changes;
DROP TABLE published_configs;
DROP TABLE credentials;
DROP TABLE account_issuers;
DROP TABLE service_accounts;
DROP TABLE services;
DROP TABLE customers;
