-- Where each agent fetched from (docs/api.md, "Key readiness"): an IPv4 /24 or an IPv6 /48 per
-- row, with the agent's last fetch from there, per service, document and hour. A key's verifiers
-- are recognised by their agent and these networks. At most 16 networks per agent and hour.
CREATE TABLE fetch_networks (
    service_id TEXT NOT NULL,
    document TEXT NOT NULL,
    hour BIGINT NOT NULL,
    agent TEXT NOT NULL,
    network TEXT NOT NULL,
    last_at BIGINT NOT NULL,
    PRIMARY KEY (service_id, document, hour, agent, network)
);
CREATE INDEX fetch_networks_by_hour ON fetch_networks (hour);
