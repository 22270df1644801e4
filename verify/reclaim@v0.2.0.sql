-- Verify mailroom:reclaim on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.reclaim(timestamptz, integer)', 'execute');

ROLLBACK;
