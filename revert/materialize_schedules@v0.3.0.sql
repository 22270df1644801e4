-- Revert mailroom:materialize_schedules from pg

BEGIN;

DROP FUNCTION mailroom.materialize_schedules(timestamptz, integer);

COMMIT;
