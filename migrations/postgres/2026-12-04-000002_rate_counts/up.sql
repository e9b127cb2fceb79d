-- The rate limits' counts shared by the replicas (docs/api.md, "Limits"): each replica adds, about
-- once a second, the events each limit let through for each subject (a credential, a customer, an
-- address, a lookup id) to its own count of the clock minute, and reads the counts the others
-- wrote since its last look. Times in milliseconds since the epoch; kept 2 hours.
CREATE TABLE rate_counts (
    limit_name TEXT NOT NULL,
    subject TEXT NOT NULL,
    replica TEXT NOT NULL,
    minute BIGINT NOT NULL,
    events BIGINT NOT NULL,
    written_at BIGINT NOT NULL,
    PRIMARY KEY (limit_name, subject, replica, minute)
);
CREATE INDEX rate_counts_by_written_at ON rate_counts (written_at);
