DROP TABLE purges;
DROP TABLE key_readiness;
