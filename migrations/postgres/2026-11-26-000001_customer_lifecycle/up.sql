-- A disabled customer (`registry customer disable`): its credentials are refused and its services'
-- documents are not served until it is enabled again. NULL: enabled.
ALTER TABLE customers ADD COLUMN disabled_at BIGINT;
