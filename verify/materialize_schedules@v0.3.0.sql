-- Verify mailroom:materialize_schedules on pg

BEGIN;

SELECT has_function_privilege('mailroom_operator', 'mailroom.materialize_schedules(timestamptz, integer)', 'execute');

ROLLBACK;
