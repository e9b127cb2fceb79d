ALTER TABLE published_configs DROP COLUMN key_state;
