-- Verify mailroom:domain_demand on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.domain_demand(text[])', 'execute')::int;
SELECT 1/(NOT has_function_privilege('public', 'mailroom.domain_demand(text[])', 'execute'))::int;

ROLLBACK;
