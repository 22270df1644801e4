-- Verify mailroom_fleet:suppress on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_fleet_app', 'mailroom_fleet.suppress(text, text, text, text)', 'execute')::int;
SELECT 1/has_function_privilege('mailroom_fleet_operator', 'mailroom_fleet.unsuppress(text, text)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom_fleet.suppress(text, text, text, text)', 'execute'))::int;

ROLLBACK;
