DROP TABLE managed_signing;
