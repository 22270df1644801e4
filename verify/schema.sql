-- Verify mailroom:schema on pg

BEGIN;

SELECT pg_catalog.has_schema_privilege('mailroom', 'usage');

ROLLBACK;
