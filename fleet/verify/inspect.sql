-- Verify mailroom_fleet:inspect on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.inspect(text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet.inspect(text)', 'execute'))::int;

ROLLBACK;
