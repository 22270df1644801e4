-- Verify mailroom:extend_lease on pg

BEGIN;

SELECT has_function_privilege('mailroom_runner', 'mailroom.extend_lease(bigint[], uuid, interval, timestamptz)', 'execute');

ROLLBACK;
