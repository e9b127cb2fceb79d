ALTER TABLE published_configs DROP COLUMN previous_change_at;
