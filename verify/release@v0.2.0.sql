-- Verify mailroom:release on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.release(bigint[], uuid, timestamptz)', 'execute');

ROLLBACK;
