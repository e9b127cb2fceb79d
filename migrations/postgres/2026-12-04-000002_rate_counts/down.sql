DROP TABLE rate_counts;
