-- Verify mailroom:materialize_schedules on pg

BEGIN;

SELECT 1/has_function_privilege('mailroom_operator', 'mailroom.materialize_schedules(integer)', 'execute')::int;
SELECT 1/(NOT has_function_privilege('mailroom_operator', 'mailroom._materialize_schedules(integer, timestamptz)', 'execute'))::int;
SELECT 1/(pg_catalog.to_regprocedure('mailroom.materialize_schedules(timestamptz, integer)') IS NULL)::int;

ROLLBACK;
