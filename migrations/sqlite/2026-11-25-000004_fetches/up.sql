-- Fetch evidence (docs/api.md, "Fetch evidence"): public fetches of a service's documents, per hour, summed
-- over every replica (each adds its counts at least every 30 s); kept 24 hours.
CREATE TABLE fetch_counts (
    service_id TEXT NOT NULL,
    document TEXT NOT NULL,
    hour BIGINT NOT NULL,
    ok BIGINT NOT NULL,
    not_modified BIGINT NOT NULL,
    last_at BIGINT NOT NULL,
    PRIMARY KEY (service_id, document, hour)
);
CREATE INDEX fetch_counts_by_hour ON fetch_counts (hour);
-- The most frequent User-Agents of each replica's flush (cut to 100 characters).
CREATE TABLE fetch_agents (
    service_id TEXT NOT NULL,
    document TEXT NOT NULL,
    hour BIGINT NOT NULL,
    agent TEXT NOT NULL,
    count BIGINT NOT NULL,
    last_at BIGINT NOT NULL,
    PRIMARY KEY (service_id, document, hour, agent)
);
CREATE INDEX fetch_agents_by_hour ON fetch_agents (hour);
