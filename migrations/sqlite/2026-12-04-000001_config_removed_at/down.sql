DROP TABLE subdomain_removals;
ALTER TABLE services DROP COLUMN config_removed_at;
