-- Verify mailroom_fleet:queue_stats on pg (no shard is called: a directory
-- may be deployed before its server mailroom_fleet exists).

BEGIN;

SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.queue_stats()', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.fleet_summary()', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet.queue_summary()', 'execute'))::int;

ROLLBACK;
