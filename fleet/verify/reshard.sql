-- Verify mailroom_fleet:reshard on pg (no shard is called).

BEGIN;

SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.map_check()', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.calls_begun_before(timestamptz)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet.map_check()', 'execute'))::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet.calls_begun_before(timestamptz)', 'execute'))::int;
SELECT 1/(NOT has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet._shard_identity_on(integer)', 'execute'))::int;
SELECT 1/has_table_privilege('mailroom_fleet_operator', 'mailroom_fleet.shards', 'select')::int;
SELECT 1/(NOT has_table_privilege('public', 'mailroom_fleet.shards', 'select'))::int;
SELECT 1/pg_has_role('mailroom_fleet_owner', 'pg_read_all_stats', 'USAGE')::int;

ROLLBACK;
