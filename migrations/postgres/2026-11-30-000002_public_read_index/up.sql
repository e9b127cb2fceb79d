-- The public path's read of a service by its subdomain (a first fetch of an issuer) finds in
-- this index all it needs of the service (the id it joins the configuration by, the customer
-- whose state it checks, the expiry): an index-only scan where the table's pages are all
-- visible.
CREATE INDEX services_published ON services (subdomain) INCLUDE (id, customer_id, expires_at);
