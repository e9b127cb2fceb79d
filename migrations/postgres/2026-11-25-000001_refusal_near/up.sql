-- The refusal log keeps two classes per account (docs/api.md, "Limits that hold"): near misses of the account's
-- own rules, and the rest, each its newest 100, so that holders of a shared issuer's tokens
-- cannot push the owner's refusals out. Rows written before this column count as the rest.
ALTER TABLE refusals ADD COLUMN near BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX refusals_by_account_class ON refusals (account_id, near, seq);
