-- Verify mailroom_fleet:shard_status on pg (no shard is called).

BEGIN;

SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.shard_status()', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet.shard_status()', 'execute'))::int;
SELECT 1/(NOT has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet._shard_summary_on(integer)', 'execute'))::int;

ROLLBACK;
