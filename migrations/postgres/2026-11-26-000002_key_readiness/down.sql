DROP TABLE key_readiness;
