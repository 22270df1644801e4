-- Verify mailroom_fleet:schema on pg

BEGIN;

SELECT 1/count(*)::int FROM pg_catalog.pg_extension WHERE extname = 'plproxy';
SELECT 1/has_schema_privilege('mailroom_fleet_operator', 'mailroom_fleet', 'usage')::int;
SELECT 1/(NOT has_schema_privilege('public', 'mailroom_fleet', 'usage'))::int;
SELECT partition, connstr FROM mailroom_fleet.shard_map WHERE false;

ROLLBACK;
