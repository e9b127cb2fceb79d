-- The key lifecycle (docs/api.md, "Key lifecycle"): every key a service publishes, current or retired, as JSON
-- (registry_domain::keys::KeyState). Empty for configurations published before it: their keys
-- are all current.
ALTER TABLE published_configs ADD COLUMN key_state TEXT NOT NULL DEFAULT '';
