DROP INDEX refusals_by_account_class;
ALTER TABLE refusals DROP COLUMN near;
