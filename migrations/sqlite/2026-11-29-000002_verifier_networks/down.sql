DROP TABLE fetch_networks;
