DROP TABLE fetch_agents;
DROP TABLE fetch_counts;
