ALTER TABLE customers DROP COLUMN disabled_at;
