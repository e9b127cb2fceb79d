DROP INDEX services_published;
